"""The vdev queue model, report section, vqstat and panel, over a capture recorded from a real lab
run (tests/data, see conftest): the probe's own numbers must add up the way queueing says."""
import csv
import io
import json

import pytest
from rich.console import Console

from zfsobs.capture import read_capture
from zfsobs.events import Parser, parse_all
from zfsobs.model import Model
from zfsobs.model.vdev_queue import BUCKETS, lat_bounds, lat_bucket
from zfsobs.views import report
from zfsobs.views.vq_panel import render_vq
from zfsobs.views.vqstat import Vqstat


@pytest.fixture
def model(capture_path):
    m = Model(keep=None)
    for ev in parse_all(read_capture(capture_path).lines, Parser()):
        m.feed(ev)
    if not m.vq.series:
        pytest.fail("the recorded capture has no vdev_queue lines: re-record it (scripts/record-fixtures)")
    return m


def test_buckets_tile_the_line_and_match_the_probes_shifts():
    assert lat_bounds(0) == (0, 2048)
    for b in range(1, BUCKETS):
        assert lat_bounds(b)[0] == lat_bounds(b - 1)[1]
        assert lat_bucket(lat_bounds(b)[0]) == b and lat_bucket(lat_bounds(b)[0] - 1) == b - 1
    assert lat_bounds(BUCKETS - 1)[1] == float("inf") and lat_bucket(10**12) == BUCKETS - 1


def test_every_line_conserves_ios_and_stays_within_its_class_limit(model):
    """Exact once a vdev is idle (its final lines); a line made while another CPU is half-way
    through an update may be off by one for that instant (values are cumulative: the next heals)."""
    lines, torn = 0, 0
    for s in model.vq.series.values():
        for ln in s.lines:
            v = ln.values
            assert ln.pend >= 0 and ln.act >= 0 and ln.pend_max >= 0 and ln.act_max >= 0
            off = (v["enq"] - (v["issued"] + v["merged"] + ln.pend),        # every entered I/O is somewhere
                   v["issued"] + v["aggs"] - (v["done"] + ln.act + v["untracked_act"]))
            if s.final and ln is s.last:
                assert off == (0, 0), (s.pid, s.vd, s.cls, ln)
            torn += off != (0, 0)
            assert max(map(abs, off)) <= 2, (s.pid, s.vd, s.cls, ln)
            if s.max_active is not None:
                assert ln.act_max <= s.max_active, (s.pid, s.cls, ln)
            lines += 1
    assert lines > 100 and torn <= lines // 100
    assert sum(s.final for s in model.vq.series.values()) > 10


def test_littles_law_holds_exactly_for_vdevs_that_drained(model):
    drained = [s for s in model.vq.series.values() if s.final and s.last.pend == 0 and s.last.act == 0]
    assert len(drained) > 10
    for s in drained:
        v = s.last.values
        assert v["pend_ns"] == v["wait_ns"] and v["act_ns"] == v["dev_ns"], (s.pid, s.vd, s.cls)


def test_histograms_count_every_wait_and_every_device_io(model):
    for s in model.vq.series.values():
        # a flush prints both histograms right after its vq line: s.hist is of the last line
        assert sum(s.hist[0]) == s.last.values["issued"] + s.last.values["merged"]
        assert sum(s.hist[1]) == s.last.values["done"]


def test_window_means_add_up_to_the_whole_integral(model):
    """Means over consecutive 1-s windows (interpolated between lines) sum back to the exact total."""
    s = max(model.vq.series.values(), key=lambda s: s.last.values["act_ns"])
    t0, t1 = s.lines[0].ts, s.last.ts
    total_act = total_pend = 0.0
    t = t0
    while t < t1:
        end = min(t + 10**9, t1)
        w = s.window(t, end)
        total_act += w["act_mean"] * (end - t)
        total_pend += w["pend_mean"] * (end - t)
        t = end
    assert total_act == pytest.approx(s.last.values["act_ns"] - s.lines[0].values["act_ns"], rel=1e-9)
    assert total_pend == pytest.approx(s.last.values["pend_ns"] - s.lines[0].values["pend_ns"], rel=1e-9, abs=1)


def test_report_rows_and_summary_agree(capture_path, model):
    data = json.loads(report.render(read_capture(capture_path), "json"))
    rows, summary = data["vdev_queue"], data["summary"]["vdev_queue"]
    assert len(rows) == len(model.vq.series)
    for pool, classes in summary.items():
        for name, st in classes.items():
            mine = [r for r in rows if r["pool"] == pool and r["class"] == name]
            assert st["enq"] == sum(r["enq"] for r in mine) and st["done"] == sum(r["done"] for r in mine)
            assert st["act_max"] == max(r["act_max"] for r in mine)
            assert all(r["act_max"] <= r["max_active"] for r in mine)
    table = list(csv.DictReader(io.StringIO(report.render(read_capture(capture_path), "csv", "vdev_queue"))))
    assert len(table) == len(rows) and "act_mean" in table[0]
    assert "vdev queue" in report.render(read_capture(capture_path), "text")


def test_vqstat_prints_zpool_iostat_q_columns_with_window_means(model):
    out = io.StringIO()
    vq = Vqstat(model, {}, 1.0, None, verbose=True, out=out)
    s = max(model.vq.series.values(), key=lambda s: s.last.values["enq"])
    end = s.lines[len(s.lines) // 2].ts
    vq.interval(end - 10**9, end)
    text = out.getvalue().splitlines()
    assert text[0].split()[:4] == ["syncq_read", "syncq_write", "asyncq_read", "asyncq_write"]
    body = text[2:]
    first = next(i for i, ln in enumerate(body) if not ln.startswith("  "))
    vdevs = []
    for ln in body[first + 1:]:
        if not ln.startswith("  "):
            break
        vdevs.append(ln)
    pools = [body[first]]
    assert vdevs
    # a pool's mean is the sum of its vdevs' means, column by column
    pool_cols = [float(x) for x in pools[0].split()[1:]]
    vdev_cols = [[float(x) for x in ln.split()[-14:]] for ln in vdevs]
    for i, value in enumerate(pool_cols):
        assert value == pytest.approx(sum(v[i] for v in vdev_cols), abs=0.01 * len(vdevs))


def test_panel_shows_the_busiest_vdevs_with_their_class_limits(model):
    s = max(model.vq.series.values(), key=lambda s: s.last.values["enq"])
    now = s.lines[len(s.lines) // 2].ts
    console = Console(width=200, record=True)
    console.print(render_vq(model, 8, now))
    text = console.export_text()
    assert "vdev queue" in text and "≤" in text
    vdev = model.vq.vdev(s)
    assert any(v.path.rsplit("/", 1)[-1] in text for v in model.vq.vdevs.values() if v.pool == vdev.pool)
