"""The zil and throttle probes leave nothing of a finished process's pools in their maps, on real
libzpool: they count in map sets that bpftrace clears as it prints them, and forget a pool's name
at txg_sync_stop() (an export, an unload: each of ztest's passes ends one). Each probe runs in a
bpftrace of its own beside a `zfsobs record --lab` that ends by itself; their END prints what their
maps still hold."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import lab_ready, lab_run, truth_running, ztest_lived
from zfsobs.targets.render import render
from zfsobs.targets.target import libzpool

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ok")]

# what END prints of the maps that hold per-pool state, before it clears them (the test asks for it)
END = ("clear(@pool_seen);", "print(@pool_seen); clear(@pool_seen);")
PER_POOL = re.compile(r"^@(pool_seen)\[(-?\d+)[,\]]", re.M)


@lab_run
def test_no_counters_of_a_finished_process_are_left(tmp_path):
    lib = libzpool()
    outs = {}
    for name in ("zil", "throttle"):
        text = render(name, lib).text
        assert "LIB" not in text
        assert text.count(END[0]) == 1
        text = text.replace(*END)
        (tmp_path / name).mkdir()
        outs[name] = text
    with truth_running(tmp_path / "zil", outs["zil"], lib.path), \
            truth_running(tmp_path / "throttle", outs["throttle"], lib.path):
        res = subprocess.run([sys.executable, "-m", "zfsobs", "record", "--lab", "--workload", "zil",
                              "--lab-time", "30", "-O", str(tmp_path / "x.cap")],
                             capture_output=True, text=True, timeout=600)
    ztest_lived(res.stderr)
    assert res.returncode == 0, res.stderr
    zil, thr = ((tmp_path / n / "truth.out").read_text() for n in ("zil", "throttle"))
    # the probes counted, in more than one ztest process (a pass, or an import's own)
    counted = {int(p) for p in re.findall(r"^@n\d\[(\d+), ", zil, re.M)}     # commits in a dump of the sets
    throttled = {int(p) for p in re.findall(r"^@[nx]\d\[(\d+), ", thr, re.M)}
    assert len(counted) >= 2 and len(throttled) >= 2, (counted, throttled)
    left = [(m[1], int(m[2])) for text in (zil, thr) for m in PER_POOL.finditer(text)]
    assert [(name, pid) for name, pid in left if pid in counted | throttled] == []
