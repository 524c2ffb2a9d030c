"""Several labs on one host: a plain `zfsobs lab set` refuses when two labs run (it could not tell
which one is meant), so every lab test and scripts/scenario passes its own lab's ztest --pid
(conftest.lab_set). With an unrelated lab running beside it, a test's change still goes into its
own lab, and only there."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from conftest import lab_ready, lab_set, lab_ztest

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ok")]

LAB = [sys.executable, "-m", "zfsobs", "lab", "--duration", "120"]


def _pass_started(parent: int, timeout: float = 120) -> None:
    """The lab's ztest has a child (its first pass): its shared options file is open by then."""
    deadline = time.monotonic() + timeout
    while not subprocess.run(["pgrep", "-P", str(parent), "-x", "ztest"], capture_output=True).stdout:
        assert time.monotonic() < deadline, f"ztest {parent}: no pass within {timeout} s"
        time.sleep(0.2)


def test_lab_set_reaches_its_own_lab_while_another_lab_runs():
    other = subprocess.Popen(LAB, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    own = subprocess.Popen(LAB, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        other_ztest, own_ztest = lab_ztest(other.pid), lab_ztest(own.pid)
        assert other_ztest != own_ztest
        _pass_started(own_ztest)
        # what the tests did before: a plain `lab set` with two labs running refuses
        plain = subprocess.run([sys.executable, "-m", "zfsobs", "lab", "set", "zfs_txg_timeout=7"],
                               capture_output=True, text=True, timeout=60)
        assert plain.returncode != 0 and "choose one with --pid" in plain.stderr, plain.stderr
        res = lab_set(own.pid, "zfs_txg_timeout=7")
        assert res.returncode == 0, res.stderr
        assert f"lab {own_ztest}: zfs_txg_timeout" in res.stderr and "-> 7" in res.stderr, res.stderr
        assert f"lab {other_ztest}" not in res.stderr
    finally:
        for proc in (own, other):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in (own, other):
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
