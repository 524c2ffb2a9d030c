"""Faults during a real lab recording: a probe's bpftrace killed under zfsobs. The capture must be
closed and valid up to that moment, the exit status non-zero with a one-line reason, and nothing
of the probes left behind: no bpftrace process, no BPF program attached to the library."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from conftest import lab_ready
from zfsobs.capture import read_capture
from zfsobs.events import Parser, parse_all
from zfsobs.targets import libzpool

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ok")]

ZFSOBS = [sys.executable, "-m", "zfsobs"]


def probe_pids(name: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"zfsobs-probes-.*/{name}.bt"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_a_probe_killed_mid_record_ends_the_capture_cleanly(tmp_path):
    cap = tmp_path / "cut.cap"
    proc = subprocess.Popen(ZFSOBS + ["record", "--lab", "-O", str(cap)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 180
        while not (cap.exists() and cap.stat().st_size > 4000):   # txgs are being written
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read()[-2000:]
            time.sleep(0.5)
        (victim,) = probe_pids("txg")
        killed_at = time.monotonic_ns()
        subprocess.run(["kill", "-KILL", str(victim)], check=True)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
    assert proc.returncode == 1, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("zfsobs: error: bpftrace (txg) exited with status -9"), err[-2000:]
    assert "Traceback" not in err
    captured = read_capture(str(cap))
    assert not captured.warnings and captured.trailer["reason"].startswith("bpftrace (txg)"), captured.warnings
    events = parse_all(captured.lines, Parser())
    txgs = [ev for ev in events if ev.kind == "txg"]
    assert txgs and all(ev.ts < killed_at for ev in txgs)
    # nothing left: the other probes' bpftrace stopped, no BPF program on the library
    time.sleep(2)
    assert not any(probe_pids(n) for n in ("txg", "zil", "vdev_queue", "vdev_cache"))
    perf = subprocess.run(["bpftool", "perf", "list"], capture_output=True, text=True).stdout
    assert libzpool().path not in perf, perf
