"""What tracing costs, as the header and trailer show it: real processes' CPU time from /proc."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from zfsobs.sources.selfcost import SelfCost, bpf_runs, cpu_seconds

BUSY = "import time\nend = time.time() + 0.6\nwhile time.time() < end: pass\n"


def test_a_busy_tracer_s_cpu_is_counted_from_the_start_and_kept_after_it_exits():
    proc = subprocess.Popen([sys.executable, "-c", BUSY])
    cost = SelfCost({"busy": proc.pid})
    time.sleep(0.5)
    assert cost.skipped() == {"busy": 0}      # a reading too: no BPF program, none skipped
    proc.wait()
    totals = cost.totals()           # the process is gone: its last reading stands
    assert cpu_seconds(proc.pid) is None
    assert 0.1 <= totals["busy"]["cpu_s"] <= 0.7, totals
    assert totals["busy"]["bpf_runs"] == 0 and bpf_runs(proc.pid) == {}
    assert totals["seconds"] >= 0.5 and totals["zfsobs_cpu_s"] >= 0


def test_the_header_line_names_zfsobs_and_the_tracers(monkeypatch):
    monkeypatch.setattr("zfsobs.sources.selfcost.EVERY_S", 0.0)     # a new line at every call
    proc = subprocess.Popen([sys.executable, "-c", BUSY])
    cost = SelfCost({"busy": proc.pid})
    time.sleep(0.2)
    line = cost.line()
    proc.wait()
    assert line.startswith("cost: zfsobs ") and "bpftrace" in line and "of a CPU" in line


def test_a_tracer_s_programs_are_read_again_from_the_fds_that_held_them():
    """The cost line reads a bpftrace's programs every 2 s: after a first read of all its fds, only
    the ones that held programs or links (a quarter of them), with the same programs found."""
    if os.geteuid() != 0 or not shutil.which("bpftrace"):
        pytest.skip("needs root and bpftrace")
    proc = subprocess.Popen(["bpftrace", "-e", "uprobe:libc:getppid { @n = count(); }"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not bpf_runs(proc.pid):
            assert time.monotonic() < deadline and proc.poll() is None, "bpftrace attached no program"
            time.sleep(0.2)
        fds = set()
        whole = bpf_runs(proc.pid, fds)
        assert fds and len(fds) < len(os.listdir(f"/proc/{proc.pid}/fdinfo"))
        kept = set(fds)
        assert bpf_runs(proc.pid, fds).keys() == whole.keys() == bpf_runs(proc.pid).keys()
        assert fds == kept
    finally:
        proc.terminate()
        proc.wait()
