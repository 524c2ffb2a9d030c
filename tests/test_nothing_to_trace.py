"""No target and no ZFS in this kernel (issue 42, item 5): `top` waited forever on "waiting for the
first txg sync…" (piped: printed nothing, exit 0). Each tracing command says in one line what it
looked for and what to try, before anything starts."""
from __future__ import annotations

import subprocess
import sys

import pytest

from zfsobs.targets.target import kernel_zfs

pytestmark = pytest.mark.skipif(kernel_zfs(), reason="this host has ZFS in its kernel: the default target is real")


@pytest.mark.parametrize("cmd", [["top"], ["top", "-s", ","], ["record", "-O", "{cap}"], ["exporter"], ["zilstat"], ["vqstat"]])
def test_nothing_to_trace_is_one_line_and_an_error(cmd, tmp_path):
    cap = tmp_path / "x.cap"
    argv = [a.format(cap=cap) for a in cmd]
    proc = subprocess.run([sys.executable, "-m", "zfsobs", *argv], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(err) == 1 and err[0].startswith("zfsobs: nothing to trace: "), err
    for said in ("/sys/module/zfs", "/proc/spl/kstat/zfs", "--lab", "--target libzpool:PATH", "zfsobs doctor"):
        assert said in err[0], said
    assert proc.stdout == "" and not cap.exists()
