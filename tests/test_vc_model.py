"""The vdev_cache model and its views over real captures (tests/data, recorded by
./scripts/record-fixtures from real bpftrace on the real libzpool 2.1.11 under ztest):
vdev-cache-2.1.11.cap with `--option zfs_vdev_cache_size=10485760`, lab-2.1.11.cap with the default."""
from __future__ import annotations

import json
import os

import pytest
from rich.console import Console

from conftest import DATA, load_capture, recorded_capture
from zfsobs.model import Model
from zfsobs.model.vdev_cache import COUNTERS, derive
from zfsobs.views import report
from zfsobs.views.vc_panel import render_vc

ON = os.path.join(DATA, "vdev-cache-2.1.11.cap")


def load(path):
    return load_capture(path, "vc")


@pytest.fixture(scope="module")
def on():
    if not os.path.exists(ON):
        pytest.fail(f"{ON} missing: run ./scripts/record-fixtures")
    return load(ON)


def test_final_lines_account_for_every_read(on):
    _, _, lines = on
    finals = [ev for ev in lines if ev.get("final")]
    assert finals
    for ev in finals:
        f = ev.fields
        assert f["reads"] == f["hits"] + f["misses"] + f["declined"], ev.line()
        assert f["read_bytes"] == f["hit_bytes"] + f["miss_bytes"] + f["declined_bytes"], ev.line()
        assert f["fill_bytes"] == f["misses"] << f["bshift"], ev.line()
    # a line counts a read when it enters, its outcome when the cache decides: never more outcomes
    for ev in lines:
        assert ev.get("hits") + ev.get("misses") + ev.get("declined") <= ev.get("reads"), ev.line()


def test_windows_add_up_to_the_whole(on):
    _, model, _ = on
    vc = model.vc
    first = min(v.lines[0].ts for v in vc.vdevs.values())
    last = max(v.lines[-1].ts for v in vc.vdevs.values())
    step = 10**9
    summed = {}
    t = first - step
    while t < last:
        for pool, w in vc.by_pool(t, t + step).items():
            summed[pool] = {c: summed.get(pool, {}).get(c, 0) + w[c] for c in COUNTERS}
        t += step
    for pool, whole in vc.by_pool().items():
        for c in COUNTERS:
            assert summed[pool][c] == pytest.approx(whole[c], rel=1e-9, abs=1e-6), (pool, c)


def test_derived_figures(on):
    _, model, _ = on
    state, why = model.vc.state()
    assert state == "active" and "zfs_vdev_cache_size=10485760" in why
    pool = max(model.vc.by_pool().items(), key=lambda kv: kv[1]["reads"])[1]
    d = derive(pool)
    assert d["inflation"] == pool["fill_bytes"] / pool["miss_bytes"] > 1
    assert d["net"] == pool["fill_bytes"] / (pool["hit_bytes"] + pool["miss_bytes"])
    assert d["amplification"] == (pool["declined_bytes"] + pool["fill_bytes"]) / pool["read_bytes"]
    assert 0 < d["hit_ratio"] < 1


def test_report_json_csv_text_agree(on):
    capture, model, _ = on
    data = report.as_dict(capture)
    vc = data["summary"]["vdev_cache"]
    assert vc["state"] == "active"
    rows = data["vdev_cache"]
    assert rows and {r["pool"] for r in rows} == set(vc["pools"])
    for pool, st in vc["pools"].items():
        for c in COUNTERS:
            assert st[c] == sum(r[c] for r in rows if r["pool"] == pool), (pool, c)
    csv = report.render(capture, "csv", "vdev_cache").splitlines()
    assert len(csv) == len(rows) + 1 and csv[0].startswith("pool,pid,vdev")
    text = report.render(capture, "text")
    assert "vdev_cache: active: zfs_vdev_cache_size=10485760" in text
    json.dumps(data)


def test_panel_shows_the_state_and_the_figures(on):
    capture, model, _ = on
    console = Console(width=200, record=True)
    console.print(render_vc(model, capture.meta, 4, model.vc.last_ts))
    out = console.export_text()
    assert "active:" in out and "inflation" in out and capture.meta["lab"]["pool"] in out


def test_default_lab_is_disabled_everywhere():
    capture, model, lines = load(recorded_capture())
    assert lines and all(ev.get("size") == 0 for ev in lines)
    assert model.vc.state()[0] == "disabled"
    console = Console(width=200, record=True)
    console.print(render_vc(model, capture.meta, 4, None))
    assert "disabled: zfs_vdev_cache_size=0" in console.export_text()
    assert "vdev_cache: disabled" in report.render(capture, "text")


def test_absent_comes_from_the_header():
    why = "probe vdev_cache: ...; the vdev cache was removed in OpenZFS 2.2.0"
    model = Model()
    assert model.vc.state(why) == ("absent", why)
    console = Console(width=200, record=True)
    console.print(render_vc(model, {"unavailable": {"vdev_cache": why}}, 4, None))
    assert "absent:" in console.export_text()
