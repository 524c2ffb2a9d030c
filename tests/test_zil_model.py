"""The ZIL model, its bins and buckets, the report's zil section and zilstat's line mode, over a
capture recorded from a real lab run (tests/data, see conftest)."""
import csv
import io
import json
from collections import Counter
from dataclasses import replace

import pytest

from zfsobs.capture import read_capture
from zfsobs.events import Parser, parse_all
from zfsobs.model import Model
from zfsobs.model.zil import COUNTERS, LAT_BUCKETS, SETTLED, lat_bounds, lat_bucket, lat_quantile, size_bin
from zfsobs.views import report
from zfsobs.views.zilstat import GRACE_NS, Zilstat


@pytest.fixture
def events(capture_path):
    return parse_all(read_capture(capture_path).lines, Parser())


def fed(evs):
    m = Model(keep=None)
    for ev in evs:
        m.feed(ev)
    return m


def test_size_bins_are_zilstats_by_log_block_size():
    assert [size_bin(n) for n in (512, 4096)] == ["lwb_le4k"] * 2
    assert [size_bin(n) for n in (4097, 12288, 32767)] == ["lwb_4to32k"] * 3
    assert [size_bin(n) for n in (32768, 36864, 131072)] == ["lwb_ge32k"] * 3


def test_latency_buckets_tile_the_line_half_a_power_of_two_wide():
    assert lat_bounds(0) == (0, 1024) and lat_bounds(1) == (1024, 1536) and lat_bounds(2) == (1536, 2048)
    for i in range(LAT_BUCKETS - 1):
        low, high = lat_bounds(i)
        assert lat_bucket(low) == i and lat_bucket(int(high) - 1) == i and lat_bounds(i + 1)[0] == high
        assert i < 2 or high / low <= 1.5
    assert lat_bucket(10**12) == LAT_BUCKETS - 1 and lat_bounds(LAT_BUCKETS - 1)[1] == float("inf")


def test_latency_quantiles_are_bucket_upper_bounds_capped_at_the_exact_max():
    hist = [0] * LAT_BUCKETS
    hist[lat_bucket(5000)] = 98
    hist[lat_bucket(3_000_000)] = 2
    assert lat_quantile(hist, 0.5, 3_100_000) == lat_bounds(lat_bucket(5000))[1]
    assert lat_quantile(hist, 0.99, 3_100_000) == 3_100_000       # bucket bound > max: the max
    assert lat_quantile([0] * LAT_BUCKETS, 0.5, None) is None


def test_rows_count_each_commit_once_across_cpus_and_refreshes(events):
    zil = [ev for ev in events if ev.kind.startswith("zil")]
    assert zil, "the recorded capture has no zil events"
    assert {ev.fields["final"] for ev in zil} == {0, 1}, "real refreshes and final lines"
    full = fed(events).zil
    finals = fed([ev for ev in events if not ev.kind.startswith("zil") or ev.fields["final"] == 1]).zil
    for pool, state in full.pools.items():
        def table(rows):
            return sorted((r.last_ts, sorted(r.as_dict().items())) for r in rows)
        assert table(state.order) == table(finals.pools[pool].order)
        for r in state.order:
            assert r.final and sum(r.lat_hist) == r.counts["commits"]
            assert r.itx_types[0] >= 0 and r.counts["lwbs"] == sum(r.counts[k] for k in
                                                                   ("lwb_le4k", "lwb_4to32k", "lwb_ge32k"))
        totals = full.stats(pool, list(state.order))
        assert all(totals[name] == state.totals[name] for name in COUNTERS)
        assert sum(totals["lat_hist"]) == totals["commits"] > 0
        # settled rows keep their sums, not each CPU's latest values (the live model's memory)
        assert len(state.order) > SETTLED and not any(r._parts for r in list(state.order)[:-SETTLED])


def test_each_row_is_the_txg_open_when_its_events_happened_and_closes_at_that_txgs_sync(events):
    m = fed(events)
    syncs = {}
    for ev in events:
        if ev.kind == "txg":     # a pool re-imported in the same process may sync a txg number twice
            syncs.setdefault((ev.fields["pool"], ev.fields["pid"], ev.fields["txg"]), []).append(ev.fields["start"])
    rows = [r for state in m.zil.pools.values() for r in state.order]
    for r in rows:
        starts = [s for s in syncs.get((r.pool, r.pid, r.txg), []) if abs(r.last_ts - s) < 50_000_000]
        assert len(starts) == 1, r.txg
        assert m.zil.pools[r.pool].at_sync(r.pid, r.txg, starts[0]) is r


def test_a_pool_reaching_the_same_txgs_again_adds_rows_never_overwrites(events):
    zil = [ev for ev in events if ev.kind.startswith("zil")]
    later = [replace(ev, ts=ev.ts + 10**12) for ev in zil]
    once, twice = fed(zil).zil, fed(zil + later).zil
    for pool in once.pools:
        assert len(twice.pools[pool].order) == 2 * len(once.pools[pool].order)
        assert all(twice.pools[pool].totals[n] == 2 * once.pools[pool].totals[n] for n in COUNTERS)


def test_report_has_a_zil_section_with_per_txg_rows(capture_path):
    cap = read_capture(capture_path)
    data = json.loads(report.render(cap, "json"))
    rows, summary = data["zil"], data["summary"]["zil"]
    assert rows and set(summary) == {r["pool"] for r in rows}
    for pool, st in summary.items():
        mine = [r for r in rows if r["pool"] == pool]
        assert st["commits"] == sum(r["commits"] for r in mine)
        assert sum(b["count"] for b in st["lat_hist"]) == st["commits"]
        assert st["lat_p50_ns"] <= st["lat_p99_ns"] <= st["lat_max_ns"]
    table = list(csv.DictReader(io.StringIO(report.render(cap, "csv", "zil"))))
    assert len(table) == len(rows) and int(table[0]["nused"]) == rows[0]["nused"]
    text = report.render(cap, "text")
    assert "ZIL" in text and str(sum(st["commits"] for st in summary.values())) in text


def test_zilstat_txg_mode_prints_every_txg_and_its_totals_match_the_report(events, capture_path):
    m, out = Model(keep=None), io.StringIO()
    zs = Zilstat(m, read_capture(capture_path).meta, None, None, out=out)
    for ev in events:
        m.feed(ev)
        zs.on_event(ev)
        zs.on_tick(ev.ts)
    zs.finish()
    lines = out.getvalue().splitlines()
    header = lines[0].split()
    assert header[:2] == ["txg", "pool"]
    parsed = [dict(zip(header, line.split())) for line in lines[1:]]
    data = json.loads(report.render(read_capture(capture_path), "json"))
    assert len(parsed) == len(data["txgs"])
    for column, name in (("N-Bytes", "nused"), ("B-Bytes", "size"), ("ops", "lwbs"), ("<=4kB", "lwb_le4k"),
                         ("4-32kB", "lwb_4to32k"), (">=32kB", "lwb_ge32k")):
        assert sum(int(p[column]) for p in parsed) == sum(st[name] for st in data["summary"]["zil"].values())


def test_zilstat_interval_mode_covers_the_run_and_count_stops_it(events, capture_path):
    m, out = Model(keep=None), io.StringIO()
    zs = Zilstat(m, read_capture(capture_path).meta, 1.0, None, timestamps=True, out=out)
    zs.on_tick(events[0].ts - 1)
    for ev in events:
        m.feed(ev)
        zs.on_tick(ev.ts)
    zs.on_tick(events[-1].ts + GRACE_NS + 10**9)     # an interval is printed GRACE_NS after it ends
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:2] == ["time", "N-Bytes"]
    rows = [line.split() for line in lines[1:]]
    assert len(rows) == (events[-1].ts - events[0].ts) // 10**9 + 1
    nused = sum(st.totals["nused"] for st in m.zil.pools.values())
    assert sum(int(r[1]) for r in rows) == nused > 0
    assert all(float(r[3]) >= float(r[2]) for r in rows)       # the busiest second >= the mean rate
    few = Zilstat(Model(), {}, 1.0, 3, out=io.StringIO())
    few.on_tick(0)
    assert few.on_tick(10 * 10**9) is False and few.printed == 3


def test_zilstat_interval_mode_counts_a_late_line_in_the_next_interval(events, capture_path):
    """Lines arriving 3 s after their ts (a loaded machine; its interval is already out): each is
    counted once, in the next interval printed, so the columns still add up to the run's totals."""
    m, out = Model(keep=None), io.StringIO()
    zs = Zilstat(m, read_capture(capture_path).meta, 1.0, None, out=out)
    late = 3 * 10**9
    zs.on_tick(events[0].ts + late - 1)
    for ev in events:
        m.feed(ev)
        zs.on_tick(ev.ts + late)
    zs.on_tick(events[-1].ts + late + 2 * 10**9)
    header, *rows = [line.split() for line in out.getvalue().splitlines()]
    col = {name: i for i, name in enumerate(header)}
    for column, name in (("N-Bytes", "nused"), ("B-Bytes", "size"), ("ops", "lwbs")):
        total = sum(st.totals[name] for st in m.zil.pools.values())
        assert sum(int(r[col[column]]) for r in rows) == total > 0, column


def test_rates_walk_back_only_the_window_and_count_lines_arriving_out_of_order(events):
    """A frame's rate and Max-Rate read the flow from its newest end (ten minutes of a busy pool's
    entries, for a minute's figures): the same sums as the whole flow's, on the real capture, and a
    line that arrives after a newer one (another CPU's buffer) still counts."""
    from zfsobs.model.zil import ORDER_NS

    def brute(state, start, end, name):
        per_second: dict = {}
        for ts, d in state.flow:
            if start < ts <= end:
                per_second[(ts - start) // 10**9] = per_second.get((ts - start) // 10**9, 0) + d[name]
        return sum(per_second.values()), float(max(per_second.values(), default=0))

    m = fed(events)
    checked = 0
    for state in m.zil.pools.values():
        last = state.flow[-1][0]
        for back in (1, 2, 5, 13, 30, 60):
            for span in (1, 5, 60):
                end = last - back * 10**9 // 3
                start = end - span * 10**9
                for name in ("nused", "size"):
                    assert (state.bytes_between(start, end, name), state.max_rate(start, end, name)) == \
                        brute(state, start, end, name)
                    checked += 1
        late_ts = last - ORDER_NS // 2       # arrives now, timed 5 s ago
        before = state.bytes_between(last - ORDER_NS, last)
        state.add_flow(late_ts, Counter({"nused": 7}))
        assert state.bytes_between(last - ORDER_NS, last) == before + 7
    assert checked >= 36       # every window of each pool (the capture has one)


def test_a_late_count_reprinted_final_2_corrects_its_row_and_keeps_its_sync(events):
    """zil.bt prints a txg's lines again with final=2 at the next sync when a count reached it after
    its final lines (a probe that read the open txg, then stalled while that txg closed): the row
    takes the higher counts, is not a new incarnation, and still joins its own sync."""
    zil = [ev for ev in events if ev.kind.startswith("zil")]
    last = next(ev for ev in reversed(zil) if ev.kind == "zil" and ev.fields["final"] == 1)
    flush = [ev for ev in zil if ev.ts == last.ts and ev.fields["txg"] == last.fields["txg"]]
    bumped = {"commits": last.fields["commits"] + 1, "lat_ns": last.fields["lat_ns"] + 5000}
    late = [replace(ev, ts=ev.ts + 5 * 10**9, fields={**ev.fields, "final": 2,
                                                      **(bumped if ev is last else {})}) for ev in flush]
    once, again = fed(zil).zil, fed(zil + late).zil
    pool = last.fields["pool"]
    assert len(again.pools[pool].order) == len(once.pools[pool].order)
    assert again.pools[pool].totals["commits"] == once.pools[pool].totals["commits"] + 1
    row = again.pools[pool].rows[(last.fields["pid"], last.fields["txg"])]
    assert row.final and row.last_ts == last.ts
    assert again.pools[pool].at_sync(row.pid, row.txg, last.ts) is row
