"""Model and report over a capture recorded from a real lab run (tests/data, see conftest)."""
import csv
import io
import json

from zfsobs.capture import read_capture
from zfsobs.events import Parser
from zfsobs.model import Model
from zfsobs.model.txg import TxgModel
from zfsobs.model.stats import percentile, summary
from zfsobs.views import report


def test_percentiles_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99 and percentile(values, 100) == 100
    assert percentile([7], 99) == 7 and percentile([], 50) is None
    s = summary([3, 1, 2])
    assert s == {"count": 3, "mean": 2, "p50": 2, "p95": 3, "p99": 3, "max": 3}


def events(path):
    p = Parser()
    return [ev for ev in map(p.parse, read_capture(path).lines) if ev], p


def test_model_rows_match_the_events(capture_path):
    evs, parser = events(capture_path)
    assert parser.malformed == 0
    model = Model(keep=None)
    for ev in evs:
        model.feed(ev)
    txg_events = [e for e in evs if e.kind == "txg"]
    assert txg_events, "the recorded capture has no txg events"
    assert sum(p.total for p in model.txg.pools.values()) == len(txg_events)
    for pool, state in model.txg.pools.items():
        rows = list(state.rows)
        mine = [e for e in txg_events if e.fields["pool"] == pool]
        assert [r.txg for r in rows] == [e.fields["txg"] for e in mine]
        assert all(r.sync_ns > 0 for r in rows)
        # per process, each interval is the gap between sync starts; ztest re-creates its pool
        # within one process, and the new incarnation (txgs start over) has no interval yet
        by_pid = {}
        for r in rows:
            prev = by_pid.get(r.pid)
            if prev is not None and r.txg > prev.txg:
                assert r.interval_ns == r.start_ns - prev.start_ns
            elif prev is not None:
                assert r.interval_ns is None, (prev, r)
            by_pid[r.pid] = r


def test_bounded_model_keeps_the_newest_rows(capture_path):
    evs, _ = events(capture_path)
    model = TxgModel(keep=5)
    for ev in evs:
        if ev.kind == "txg":
            model.feed(ev)
    for state in model.pools.values():
        assert len(state.rows) <= 5 and state.total >= len(state.rows)


def test_window_stats_cover_only_the_last_minute():
    model = TxgModel()
    p = Parser()
    minute = 60 * 10**9
    for i, start in enumerate((0, minute // 2, 2 * minute, 2 * minute + 1)):
        model.feed(p.parse(f"zfsobs 1 txg {start} pool=a txg={i} start={start} sync_ns={1000 * (i + 1)}"))
    window = model.pools["a"].window()
    assert [r.txg for r in window] == [2, 3]
    assert model.stats("a")["sync_ns"]["max"] == 4000


def test_report_json_has_the_documented_shape(capture_path):
    data = json.loads(report.render(read_capture(capture_path), "json"))
    assert set(data) >= {"meta", "txgs"}
    assert data["meta"]["target"]["kind"] == "libzpool"
    assert data["txgs"], "no txg rows"
    for row in data["txgs"]:
        assert {"pool", "txg", "start_ns", "sync_ns", "interval_ns", "dirty_bytes"} <= set(row)
        assert row["sync_ns"] > 0
    for pool, st in data["summary"]["txg"].items():
        rows = [r for r in data["txgs"] if r["pool"] == pool]
        assert st["txgs"] == len(rows)
        assert st["sync_ns"]["max"] == max(r["sync_ns"] for r in rows)
        assert st["sync_ns"]["p50"] == percentile([r["sync_ns"] for r in rows], 50)


def test_report_csv_and_text_agree_with_json(capture_path):
    cap = read_capture(capture_path)
    data = json.loads(report.render(cap, "json"))
    rows = list(csv.DictReader(io.StringIO(report.render(cap, "csv"))))
    assert len(rows) == len(data["txgs"])
    assert [int(r["txg"]) for r in rows] == [r["txg"] for r in data["txgs"]]
    text = report.render(cap, "text")
    for pool, st in data["summary"]["txg"].items():
        line = next(l for l in text.splitlines() if l.startswith(pool))
        assert f"{st['sync_ns']['max'] / 1e6:.3f}" in line


def test_a_report_whose_rows_outgrow_the_model_is_the_same_report(capture_path, monkeypatch):
    """A long capture's txg and ZIL rows leave the model for the ledger (views/ledger.py) as newer
    ones come: with the model keeping 7 rows, not 5000, the report is the same, byte for byte."""
    cap = read_capture(capture_path)
    whole = {fmt: report.render(cap, fmt) for fmt in ("json", "text")}
    zil_csv = report.render(cap, "csv", "zil")
    monkeypatch.setattr("zfsobs.model.KEEP", 7)
    model, _ = built = report.build(cap, samples=False)
    assert all(len(s.rows) <= 7 for s in model.txg.pools.values())
    assert sum(s.n for s in model.ledger.txg_stats.values()) == len(json.loads(whole["json"])["txgs"]) > 7
    assert {fmt: report.render(cap, fmt) for fmt in ("json", "text")} == whole
    assert report.render(cap, "csv", "zil") == zil_csv
    assert report.as_dict(cap, built) == json.loads(whole["json"])


def test_the_report_max_rate_is_the_busiest_second_of_the_whole_capture(capture_path, monkeypatch):
    """Max-Rate in a report covers every second, not the 10 minutes of flow the live view keeps:
    with the flow and its seconds kept 2 s here, the 20 s capture's answer is the brute-force one."""
    from zfsobs.model import zil
    cap = read_capture(capture_path)
    data = json.loads(report.render(cap, "json"))
    seen = {}
    real_add = zil.PoolZil.add_flow

    def add_flow(self, ts, delta):
        seen.setdefault(id(self), []).append((ts, delta["nused"]))
        real_add(self, ts, delta)
    monkeypatch.setattr(zil, "FLOW_KEEP_NS", 2 * 10**9)
    monkeypatch.setattr(zil.PoolZil, "add_flow", add_flow)
    model, _ = report.build(cap, samples=False, rows=False)
    checked = 0
    for pool, state in model.zil.pools.items():
        flow = seen[id(state)]
        anchor, per_second = flow[0][0] - 1, {}
        for ts, n in flow:
            if ts > anchor:
                per_second[(ts - anchor) // 10**9] = per_second.get((ts - anchor) // 10**9, 0) + n
        assert len(per_second) > 4, "the capture should span more seconds than are kept"
        assert state.busiest_second() == float(max(per_second.values())) == data["summary"]["zil"][pool]["max_rate_nused"]
        checked += 1
    assert checked
