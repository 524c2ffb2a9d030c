"""`zfsobs lab set` runs as root and writes into a ztest's memory and its shared options file: it
must only ever write into a lab of the user who runs it. A ztest that another user (nobody) runs
on a pool named like a lab's is not a lab of root's, and its memory stays as it was."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import lab_ready

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ok")]

ZTEST = "/usr/sbin/ztest"


def _ztest_of(uid: int, pool: str) -> int | None:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    args = f.read().split(b"\0")
                if os.stat(f"/proc/{entry}").st_uid == uid and pool.encode() in args \
                        and os.getpgid(int(entry)) == int(entry):
                    return int(entry)
            except OSError:
                continue
    return None


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root and runuser")
def test_lab_set_never_writes_into_another_users_ztest():
    import pwd
    import tempfile
    nobody = pwd.getpwnam("nobody")
    vdevs = tempfile.mkdtemp(prefix="lab-set-owner-", dir="/tmp")     # nobody reaches /tmp, not pytest's
    os.chown(vdevs, nobody.pw_uid, nobody.pw_gid)
    pool = f"zfsobs_lab_nobody_{os.getpid()}"
    ztest = subprocess.Popen(["runuser", "-u", "nobody", "--", "env", "ZDB_PATH=/bin/true", "ZDB=/bin/true",
                              "setsid", ZTEST, "-T", "120", "-P", "10", "-k", "0", "-s", "128m",
                              "-f", str(vdevs), "-p", pool],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        pid = None
        while pid is None and time.monotonic() < deadline:
            pid = _ztest_of(nobody.pw_uid, pool)
            time.sleep(0.2)
        assert pid, "nobody's ztest did not start"
        res = subprocess.run([sys.executable, "-m", "zfsobs", "lab", "set", "zfs_txg_timeout=7", "--pid", str(pid)],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode != 0, res.stdout + res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "not a running lab's ztest" in lines[0], res.stderr
        assert "->" not in res.stdout + res.stderr          # no "NAME OLD -> NEW": nothing written
        # without --pid, lab set takes the one lab it finds: never this one (a plain `lab set` here
        # would write into whichever lab of root's runs beside the test)
        from zfsobs.labs.knob import _lab_parents
        assert pid not in _lab_parents()
    finally:
        pid = _ztest_of(nobody.pw_uid, pool)
        if pid:
            os.killpg(pid, 9)
        ztest.wait(30)
        shutil.rmtree(vdevs, ignore_errors=True)
