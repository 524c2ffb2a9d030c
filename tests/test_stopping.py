"""The sources' one stop hook (zfsobs/sources/stopping.py): the session names the lab's stop once,
and every source runs it once from finish(), as soon as its stop is asked."""
from __future__ import annotations

import time

from zfsobs.sources.bpftrace import BpftraceSource
from zfsobs.sources.dtrace import DtraceSource
from zfsobs.sources.stopping import Stopping


def test_bpftrace_runs_the_hook_once_after_asking_the_stop():
    source = object.__new__(BpftraceSource)
    source._runtime()
    seen = []
    source.on_stop = lambda: seen.append(source._stop_ns)
    assert source.finish() == [] and source.finish() == []
    assert len(seen) == 1 and seen[0] is not None      # once, after the stop was asked


def test_every_source_has_the_hook():
    from zfsobs.sources.kstat import KstatSource
    assert all(issubclass(cls, Stopping) for cls in (BpftraceSource, DtraceSource, KstatSource))
    assert Stopping().on_stop is None


# A tracer whose END comes LATE_S after the stop (bpftrace's uprobe detach took 13-18 s at load 8-10
# here): it prints bye on SIGINT (the stop dtrace gets) once that time has passed, then exits.
LATE_S = 7.0
SLOW_TRACER = ("import signal, sys, time\n"
               "def stop(*_):\n"
               f"    time.sleep({LATE_S})\n"
               "    print(f'zfsobs 1 bye {time.monotonic_ns()} probe=p', flush=True)\n"
               "    sys.exit(0)\n"
               "signal.signal(signal.SIGINT, stop)\n"
               "print(f'zfsobs 1 hello {time.monotonic_ns()} probe=p', flush=True)\n"
               "while True:\n"
               "    time.sleep(0.1)\n")


def test_a_tracer_slow_to_detach_keeps_its_last_lines():
    """The stop waits for END's lines as long as it waits for the tracer to exit (STOP_WAIT_S): a
    5 s wait in finish() lost bye and END's counts of a tracer still detaching, while close() then
    waited 10 s more for its exit anyway."""
    import subprocess
    import sys
    import threading
    source = object.__new__(BpftraceSource)
    source._runtime()
    source.rendered, source.meta = [], {"probes": {"p": {}}}
    proc = subprocess.Popen([sys.executable, "-c", SLOW_TRACER], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    source._procs.append(("p", proc))
    source._stderr["p"] = []
    for stream, is_err in ((proc.stdout, False), (proc.stderr, True)):
        pump = threading.Thread(target=source._pump, args=("p", stream, is_err), daemon=True)
        pump.start()
        source._pumps.append(pump)
    try:
        while not source._queue:
            time.sleep(0.05)
        source._started = time.monotonic()
        assert any(" hello " in line for line in source.poll(1.0)) and source.attached
        lines = source.finish()
        assert [line.split()[2] for line in lines] == ["bye"], lines
        assert int(lines[0].split()[3]) == source._stop_ns       # the window's end
    finally:
        source.close()
    assert proc.poll() == 0
