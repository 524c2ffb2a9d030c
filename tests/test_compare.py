"""`zfsobs report --compare` (text, JSON, CSV) and the live screen's tuning panel."""
import csv
import io
import json

import pytest
from rich.console import Console

from zfsobs.capture import CaptureWriter, read_capture
from zfsobs.cli import main
from zfsobs.events import Parser, parse_all
from zfsobs.model import Model
from zfsobs.model.txg import TxgModel
from zfsobs.model.segments import SETTLE_NS, between, stat
from zfsobs.views import compare, metrics
from zfsobs.views.screen import render_screen
from zfsobs.views.status import Status
from zfsobs.views.txg_panel import render_txg
from zfsobs.views.units import marked_sparkline

NAME = "zfs_vdev_async_write_max_active"
S = 10**9
POLL = 500_000_000     # the appended change's `since` is one poll before it


def with_tunables(src: str, dst: str, change: bool = True) -> int:
    """A copy of the recorded capture with tunable lines appended; returns the change's ts.

    The appended lines are made up (the recorded run changed nothing, its limit stayed 10): they
    only exercise the splitting mechanics, not what a real change does."""
    cap = read_capture(src)
    ts = sorted(ev.ts for ev in parse_all(cap.lines, Parser()))
    mid = ts[0] + (ts[-1] - ts[0]) // 2
    writer = CaptureWriter(dst, cap.meta, force=True)
    for line in cap.lines:
        writer.add(line)
    writer.add(f"zfsobs 1 tunable {ts[0]} name={NAME} old=-1 new=10 pid=1 src=mem initial=1")
    writer.add(f"zfsobs 1 tunable {ts[0]} name=zfs_txg_timeout old=-1 new=5 pid=1 src=mem initial=1")
    if change:
        writer.add(f"zfsobs 1 tunable {mid} name={NAME} old=10 new=2 pid=1 src=mem since={mid - POLL}")
    writer.close({})
    return mid


@pytest.fixture
def changed(tmp_path, capture_path):
    path = str(tmp_path / "changed.cap")
    return path, with_tunables(capture_path, path)


def whole(path):
    """The samples of the whole capture, as the report sees them."""
    model = Model(keep=None)
    for ev in parse_all(read_capture(path).lines, Parser()):
        model.feed(ev)
    model.samples.settle()
    return model


def test_json_splits_at_the_change(changed):
    """Mechanics only (appended tunable lines): two segments meeting at the change; every sample in
    one of them except those of the poll interval the change happened in and the settling second
    after it (segments.SETTLE_NS); ratios after/before of the segments' own figures."""
    path, mid = changed
    data = json.loads(compare.render(read_capture(path), "json"))
    s0, s1 = data["segments"]
    assert s0["end_ns"] == s1["start_ns"] == mid and s0["opened_by"] == []
    assert s1["opened_by"][0]["name"] == NAME and s1["opened_by"][0]["old"] == 10
    assert s0["tunables"][NAME] == 10 and s1["tunables"][NAME] == 2 and s1["tunables"]["zfs_txg_timeout"] == 5
    model = whole(path)
    for (pool, metric), track in model.samples.tracks.items():
        n0 = s0["metrics"].get(pool, {}).get(metric, {}).get("n", 0)
        n1 = s1["metrics"].get(pool, {}).get(metric, {}).get("n", 0)
        skipped = len(between(track, mid - POLL, mid + SETTLE_NS))
        assert n0 + skipped + n1 == len(track.ts), metric
        assert n1 == len(between(track, mid + SETTLE_NS, model.last_ts + 1))
    (change,) = data["changes"]
    pool = next(iter(s0["metrics"]))
    sync = change["metrics"][pool]["txg.sync_ns"]
    b, a = s0["metrics"][pool]["txg.sync_ns"], s1["metrics"][pool]["txg.sync_ns"]
    assert sync["before"] == b and sync["after"] == a
    assert sync["ratio_mean"] == pytest.approx(a["mean"] / b["mean"])
    assert sync["ratio_p99"] == pytest.approx(a["p99"] / b["p99"])
    assert b == stat(between(model.samples.tracks[(pool, "txg.sync_ns")], s0["start_ns"], mid - POLL))
    assert s1["measured_s"][0] == pytest.approx(s1["start_s"] + SETTLE_NS / 1e9)


def test_csv_one_row_per_segment_and_metric(changed):
    path, _ = changed
    data = json.loads(compare.render(read_capture(path), "json"))
    rows = list(csv.DictReader(io.StringIO(compare.render(read_capture(path), "csv"))))
    expected = sum(len(ms) for seg in data["segments"] for ms in seg["metrics"].values())
    assert len(rows) == expected
    first = [r for r in rows if r["segment"] == "0"]
    second = [r for r in rows if r["segment"] == "1"]
    assert all(r["ratio_mean"] == "" and r["opened_by"] == "" for r in first)
    sync = next(r for r in second if r["metric"] == "txg.sync_ns")
    assert sync["opened_by"] == f"{NAME} 10->2"
    pool = sync["pool"]
    assert float(sync["ratio_mean"]) == pytest.approx(data["changes"][0]["metrics"][pool]["txg.sync_ns"]["ratio_mean"])


def test_text_reads_per_change(changed):
    path, _ = changed
    data = json.loads(compare.render(read_capture(path), "json"))
    text = compare.render(read_capture(path), "text")
    assert "change 1 at " in text and f"{NAME} 10 -> 2" in text
    pool, ms = next(iter(data["changes"][0]["metrics"].items()))
    d = ms["txg.sync_ns"]
    line = next(l for l in text.splitlines() if l.strip().startswith("txg sync time"))
    assert metrics.value("txg.sync_ns", d["before"]["mean"]) in line and " ms" in line
    assert metrics.ratio(d["ratio_mean"]) in line and metrics.ratio(d["ratio_p99"]) in line
    assert "no tunable changes" not in text


def test_no_change_is_one_segment(tmp_path, capture_path, capsys):
    path = str(tmp_path / "same.cap")
    with_tunables(capture_path, path, change=False)
    assert main(["report", path, "--compare"]) == 0
    out = capsys.readouterr().out
    assert "no tunable changes in this capture" in out and "txg sync time" in out
    assert main(["report", path, "--compare", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["segments"]) == 1 and data["changes"] == []
    assert data["meta"]["tunables_initial"] == {NAME: 10, "zfs_txg_timeout": 5}


def test_cli_compare_formats(changed, capsys):
    path, _ = changed
    for fmt in ("text", "json", "csv"):
        assert main(["report", path, "--compare", "--format", fmt]) == 0
        assert capsys.readouterr().out


def screen(path: str) -> tuple[Model, str]:
    """A live model (bounded, as top and replay use it) fed the capture, and the screen at its end."""
    cap = read_capture(path)
    model = Model()
    for ev in parse_all(cap.lines, Parser()):
        model.feed(ev)
    console = Console(record=True, width=160)
    console.print(render_screen(model, Status(cap.meta, mode="replay"), 60, model.last_ts))
    return model, console.export_text()


def test_screen_shows_the_change_and_its_ratio(changed):
    path, mid = changed
    model, screen_text = screen(path)
    assert "tuning" in screen_text and f"{NAME} 10 → 2" in screen_text and "s ago" in screen_text
    # the panel's windows: start..the poll before the change, and from a settling second after it
    # to now (as report --compare); its async_write rows come first
    key = next(k for k in model.samples.keys() if k[1] == "vq.async_write.act_mean")
    track = model.samples.tracks[key]
    b = stat(between(track, model.first_ts, mid - POLL))
    a = stat(between(track, mid + SETTLE_NS, model.last_ts + 1))
    row = next(l for l in screen_text.splitlines() if "vq async_write active mean" in l)
    assert metrics.ratio(a["mean"] / b["mean"]) in row and metrics.value("x", b["mean"]) in row


def test_screen_before_any_change_lists_the_tunables(tmp_path, capture_path):
    path = str(tmp_path / "same.cap")
    with_tunables(capture_path, path, change=False)
    _, text = screen(path)
    assert f"tunables (no change yet): zfs_txg_timeout=5 {NAME}=10" in text and "╭─ tuning" not in text


def test_sparklines_mark_the_first_sample_after_a_change():
    text = marked_sparkline([1, 2, 3, 4], 3, "cyan", marks=[2])     # shows samples 1..3
    assert text.plain == "▅▆█" and [(s.start, s.end) for s in text.spans if "reverse" in str(s.style)] == [(1, 2)]
    assert not [s for s in marked_sparkline([1, 2], 5, "cyan", marks=[7]).spans if "reverse" in str(s.style)]
    txg = TxgModel()
    p = Parser()
    for i in range(1, 6):      # txg i syncs from i s for 0.1 s; the change at 3.05 s: txg 3 ends after it
        txg.feed(p.parse(f"zfsobs 1 txg {i * S + S // 10} pool=a txg={i} start={i * S} sync_ns={S // 10}"))
    console = Console(record=True, width=120, force_terminal=True, color_system="standard")
    console.print(render_txg(txg, 3, [S // 2, 3 * S + S // 20]))     # the first: before every txg shown
    sync = next(l for l in console.export_text(styles=True).splitlines() if "sync  " in l and "█" in l)
    codes = sync.split("█")          # codes[k]: the style switches just before bar k
    assert len(codes) == 6 and ";7" in codes[2] and ";7" not in codes[1] + codes[3]   # txg 3 reversed
