"""The vdev queue depths stay right when bpftrace falls behind (CI's 2.4.4 guest once did, under
emulation: a dump printed after the probes were back on its set, whose clear took an I/O's +1 it
never printed, and that queue's mean depth read -0.76 for the rest of the run).

A real lab run, its vdev_queue bpftrace starved: stopped, then let run 3 ms in each 2.05 s for 12 s
(a stop of 4 ticks; six stops: the probes come back to a set only once bpftrace printed it).
The probes go back to a set only once bpftrace has cleared it (probes/linux/vdev_queue.bt), so they
are held on their set instead, and no depth change is lost: at each vdev's last line before ZFS
frees it (idle), the time still counted in flight is at most its depth times the longest device
(or queue) time it had, plus a turn of the map sets (1.5 s with three: a completion's -1 can sit in
a set printed after the line). A lost +1 or -1 breaks that for ever: the probe of a09c503 left an active
depth stuck at 1, 946 s in flight on a vdev whose I/Os took ms."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import lab_ready, lab_run, still_running, ztest_lived
from vq_ledger import ledger_errors
from test_lab_faults import probe_pids
from zfsobs.capture import read_capture
from zfsobs.events import Parser, parse_all
from zfsobs.model.vdev_queue import lat_bounds
from zfsobs.targets.sets import SETS

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ok")]

ZFSOBS = [sys.executable, "-m", "zfsobs"]
TURN_NS = SETS * 500_000_000      # the probe's map sets, 500 ms each


def starve(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    time.sleep(2)
    for _ in range(6):
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.003)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(2.05)
    for pid in pids:
        os.kill(pid, signal.SIGCONT)


@pytest.fixture(scope="module")
@lab_run
def starved(tmp_path_factory):
    cap = tmp_path_factory.mktemp("starved") / "starved.cap"
    proc = subprocess.Popen(ZFSOBS + ["record", "--lab", "--lab-time", "20", "-O", str(cap)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (cap.exists() and cap.stat().st_size > 20000):
        still_running(proc)
        assert time.time() < deadline, "too slow"
        time.sleep(0.5)
    pids = probe_pids("vdev_queue", proc.pid)
    assert len(pids) == 1, pids
    try:
        starve(pids)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=400)
    ztest_lived(err)
    assert proc.returncode == 0, err[-2000:]
    return list(parse_all(read_capture(str(cap)).lines, Parser()))


def test_the_dumps_came_late(starved):
    # the situation under test: the probes waited for bpftrace to clear a set (the bye line's count)
    held = [ev.fields.get("held") for ev in starved if ev.kind == "bye" and ev.fields.get("probe") == "vdev_queue"]
    assert held and int(held[0]) >= 5, f"the probes were held {held} ticks: bpftrace was not starved"


def test_no_depth_change_is_lost(starved):
    lines, longest = {}, {}
    for ev in starved:
        key = (ev.get("pid"), ev.get("vd"), ev.get("class"))
        if ev.kind == "vq":
            lines.setdefault(key, []).append(ev.fields)
        elif ev.kind == "vq_lat":
            top = max((b for b in range(24) if ev.fields[f"b{b}"]), default=0)
            longest[key + (ev.get("kind"),)] = lat_bounds(top)[1]
    checked = 0
    for key, series in lines.items():
        if not series[-1]["final"] or len(series) < 2:
            continue
        last = series[-2]       # the line before ZFS freed the vdev
        for depth, integral, done, kind in (("pend", "pend_ns", "wait_ns", 0), ("act", "act_ns", "dev_ns", 1)):
            in_flight = last[integral] - last[done]
            assert 0 <= in_flight <= last[depth] * (longest.get(key + (kind,), 0) + TURN_NS), (key, depth, last)
        checked += 1
    assert checked >= 20, f"only {checked} freed vdev queues"


def test_every_line_keeps_the_books(starved):
    assert ledger_errors(ev.line() for ev in starved) == []
