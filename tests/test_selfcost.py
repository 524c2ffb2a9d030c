"""What tracing costs, as the header and trailer show it: real processes' CPU time from /proc."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from zfsobs.procs import stop
from zfsobs.sources.selfcost import SelfCost, bpf_runs, cpu_seconds

# 0.3 s of its own CPU, however long a busy machine takes to give it (a 0.6 s wall-clock spin got
# 0.08 CPU-s at load 16); then it says so and lives until its stdin closes, so that a reading is
# taken after the spin (at load 5.7 one taken at 0.5 s had seen 0.12 s of it)
BUSY = ("import sys, time\nend = time.time() + 120\nwhile time.process_time() < 0.3 and time.time() < end: pass\n"
        "print('spun', flush=True)\nsys.stdin.read()\n")


def test_a_busy_tracer_s_cpu_is_counted_from_the_start_and_kept_after_it_exits():
    proc = subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    cost = SelfCost({"busy": proc.pid})
    time.sleep(0.5)
    assert proc.stdout.readline() == "spun\n"
    assert cost.skipped() == {"busy": 0}      # a reading too: no BPF program, none skipped
    proc.stdin.close()
    proc.wait()
    proc.stdout.close()
    totals = cost.totals()           # the process is gone: its last reading stands
    assert cpu_seconds(proc.pid) is None
    assert 0.25 <= totals["busy"]["cpu_s"] <= 1.0, totals
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
        stop(proc, 10)       # bpftrace 0.17 can lose a SIGTERM: then SIGKILL


FAILED_READ = """
import os, resource, time
from zfsobs.sources.selfcost import SelfCost, cpu_seconds
end = time.process_time() + 0.3
while time.process_time() < end:
    pass
cost = SelfCost({"gone": 2 ** 22 + 1})       # a pid no process can have: every read fails
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
held = []
try:
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass                                 # no fd left: the next /proc read of our own fails
assert cpu_seconds("self") is None
totals = cost.totals()
for fd in held:
    os.close(fd)
print(totals["zfsobs_cpu_s"], totals["gone"]["cpu_s"])
"""


def test_a_failed_proc_read_is_skipped_not_subtracted():
    """No fd left (a real EMFILE) fails zfsobs's read of its own /proc/self/stat at the end: the
    cost is what was read before (0 or more), never minus the CPU time of the start (-0.45 once)."""
    out = subprocess.run([sys.executable, "-c", FAILED_READ], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    own, gone = map(float, out.stdout.split())
    assert own >= 0 and gone == 0, out.stdout
