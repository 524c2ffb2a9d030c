"""What tracing costs, as the header and trailer show it: real processes' CPU time from /proc."""
from __future__ import annotations

import subprocess
import sys
import time

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
