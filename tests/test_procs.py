"""What zfsobs removes and writes as root in shared directories (/tmp, /dev/shm, /var/tmp): only
what it provably made, never through a symlink another user put there, and no name another
user can make stops it. The hostile entries are made by user nobody, for real."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from zfsobs.labs.userland import Lab
from zfsobs.procs import remove_stale

PREFIX = "zfsobs-probes-"
ROOTS = ["/tmp", "/dev/shm", "/var/tmp"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (entries made by user nobody)")


def as_nobody(*cmd: str) -> None:
    subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *cmd], check=True)


def dead_pid() -> int:
    """A pid no process has now: a child's, once it has ended."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not os.path.exists(f"/proc/{proc.pid}")
    return proc.pid


@pytest.fixture
def names():
    """Entries a test makes in the shared roots, removed afterwards whatever they are."""
    made: list[str] = []
    yield made
    for path in made:
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            shutil.rmtree(path)


@pytest.mark.parametrize("root", ROOTS)
def test_the_sweep_never_empties_what_a_user_s_symlink_points_at(root, tmp_path, names):
    precious = tmp_path / "root-owned"
    precious.mkdir()
    (precious / "file").write_text("root's\n")
    link = os.path.join(root, f"{PREFIX}{dead_pid()}-{uuid.uuid4().hex[:8]}")
    names.append(link)
    as_nobody("ln", "-s", str(precious), link)
    remove_stale(root, PREFIX)
    assert (precious / "file").read_text() == "root's\n"
    assert os.path.islink(link)          # not ours: not removed either


def test_only_a_directory_root_made_for_itself_is_removed(names):
    """A stale directory of ours goes, and a process still holding a file in it is stopped first;
    one of the same name made by nobody, or root's but writable by others, stays."""
    pid = dead_pid()
    ours = tempfile.mkdtemp(prefix=f"{PREFIX}{pid}-", dir="/tmp")
    theirs, loose = f"/tmp/{PREFIX}{pid}-nobody{uuid.uuid4().hex[:6]}", f"/tmp/{PREFIX}{pid}-loose{uuid.uuid4().hex[:6]}"
    names.extend([ours, theirs, loose])
    as_nobody("mkdir", theirs)
    as_nobody("touch", os.path.join(theirs, "f"))
    os.mkdir(loose)
    os.chmod(loose, 0o777)
    held = os.path.join(ours, "vdev")
    open(held, "w").close()
    holder = subprocess.Popen(["sh", "-c", 'exec 3<"$1"; exec sleep 600', "sh", held])
    try:
        deadline = time.monotonic() + 30
        while not any(os.readlink(f"/proc/{holder.pid}/fd/{fd}") == held
                      for fd in os.listdir(f"/proc/{holder.pid}/fd")):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        remove_stale("/tmp", PREFIX)
        assert holder.wait(30) == -9
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert not os.path.exists(ours)
    assert os.path.isfile(os.path.join(theirs, "f")) and os.path.isdir(loose)


@pytest.mark.parametrize("pid", ["99999999999999999999", "4194305", "0", "-1", "1e3", "٣", " 7", "0x10"])
def test_a_name_with_no_valid_pid_is_skipped_not_an_error(pid, names):
    """A directory `zfsobs-probes-99999999999999999999-x` made by nobody made os.kill raise
    OverflowError: every root tracing command ended with `internal error` before it started."""
    path = f"/tmp/{PREFIX}{pid}-{uuid.uuid4().hex[:8]}"
    names.append(path)
    as_nobody("mkdir", path)
    remove_stale("/tmp", PREFIX)
    assert os.path.isdir(path)


def test_a_failed_ztest_s_log_is_never_written_through_a_symlink(tmp_path):
    """The log tail of a failed ztest went to /var/tmp/zfsobs-ztest-<pid>.log with open("wb"): a
    symlink nobody put at that name had root overwrite its target."""
    if not os.path.exists("/usr/sbin/ztest"):
        pytest.skip("no ztest")
    precious = tmp_path / "precious"
    precious.write_text("root's\n")
    link = f"/var/tmp/zfsobs-ztest-{os.getpid()}.log"
    as_nobody("ln", "-s", str(precious), link)
    lab = Lab()
    lab.dir = str(tmp_path)
    (tmp_path / "ztest.log").write_text("VERIFY3(0 == 1) failed\nchild died with signal 6\n")
    lab.proc = subprocess.Popen(["sh", "-c", "exit 3"])
    lab.proc.wait()
    try:
        why = lab.failure()
        assert precious.read_text() == "root's\n" and os.path.islink(link)
        kept = why.rpartition("its log: ")[2]
        assert why.startswith("ztest exited with status 3: child died with signal 6 (VERIFY3")
        assert kept.startswith(f"/var/tmp/zfsobs-ztest-{os.getpid()}-") and kept != link
        st = os.lstat(kept)
        assert (st.st_uid, st.st_mode & 0o777) == (0, 0o600) and open(kept).read().startswith("VERIFY3")
    finally:
        os.unlink(link)
        if lab.kept_log and os.path.isfile(lab.kept_log) and not os.path.islink(lab.kept_log):
            os.unlink(lab.kept_log)
