"""Capture files: round trip, crash damage, foreign and future files, permissions."""
import contextlib
import os
import stat
import struct
import subprocess
import sys
import uuid

import pytest

from zfsobs.capture import FILE_MAGIC, FORMAT_VERSION, CaptureWriter, read_capture
from zfsobs.errors import ZfsobsError

META = {"host": "h", "target": {"kind": "libzpool"}}


def lines(n, start=0):
    return [f"zfsobs 1 txg {1000 + i} pool=p txg={i} start={i} sync_ns={i + 1}" for i in range(start, start + n)]


def write(path, batches, trailer=True):
    w = CaptureWriter(str(path), META)
    for batch in batches:
        for line in batch:
            w.add(line)
        w.flush()
    if trailer:
        w.close({"reason": "test"})
    else:
        w.abandon()
    return w


def test_round_trip(tmp_path):
    path = tmp_path / "c.cap"
    write(path, [lines(10), lines(5, 10)])
    cap = read_capture(str(path))
    assert cap.lines == lines(15)
    assert cap.meta["host"] == "h" and cap.meta["format"] == "zfsobs-capture" and cap.meta["version"] == FORMAT_VERSION == 3
    assert cap.trailer["lines"] == 15 and cap.trailer["reason"] == "test"
    assert cap.warnings == []


def test_mode_is_0600_even_when_forced_over_a_loose_file(tmp_path):
    path = tmp_path / "c.cap"
    path.write_text("old")
    os.chmod(path, 0o644)
    w = CaptureWriter(str(path), META, force=True)
    w.close({})
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_refuses_to_overwrite(tmp_path):
    path = tmp_path / "c.cap"
    path.write_text("precious")
    with pytest.raises(ZfsobsError, match="exists"):
        CaptureWriter(str(path), META)
    assert path.read_text() == "precious"


def test_every_truncation_leaves_a_readable_prefix(tmp_path):
    path = tmp_path / "c.cap"
    write(path, [lines(3), lines(3, 3), lines(3, 6)])
    data = path.read_bytes()
    cut = tmp_path / "cut.cap"
    header_end = None
    for size in range(len(data)):
        cut.write_bytes(data[:size])
        try:
            cap = read_capture(str(cut))
        except ZfsobsError as exc:
            assert header_end is None, f"prefix of {size} bytes lost a readable header: {exc}"
            continue
        header_end = header_end or size
        # what is read is always whole batches, in order
        assert cap.lines == lines(len(cap.lines)) and len(cap.lines) % 3 == 0
        assert cap.trailer is None or size == len(data)
    assert header_end is not None


def test_a_damaged_record_is_skipped_and_the_rest_kept(tmp_path):
    path = tmp_path / "c.cap"
    write(path, [lines(3), lines(3, 3), lines(3, 6)])
    data = bytearray(path.read_bytes())
    cap = read_capture(str(path))
    # flip one byte inside the second events record's payload
    second = data.find(b"ZR", data.find(b"ZRE") + 3)
    data[second + 20] ^= 0xFF
    path.write_bytes(bytes(data))
    cap = read_capture(str(path))
    assert cap.lines == lines(3) + lines(3, 6)
    assert any("damaged" in w for w in cap.warnings)


def test_foreign_empty_and_future_files(tmp_path):
    foreign = tmp_path / "f"
    foreign.write_bytes(b"\x1f\x8b\x08 gzip, not ours")
    with pytest.raises(ZfsobsError, match="not a zfsobs capture"):
        read_capture(str(foreign))
    empty = tmp_path / "e"
    empty.write_bytes(b"")
    with pytest.raises(ZfsobsError, match="not a zfsobs capture"):
        read_capture(str(empty))
    future = tmp_path / "v9"
    future.write_bytes(struct.pack("<8sH", FILE_MAGIC, 9))
    with pytest.raises(ZfsobsError, match="newer"):
        read_capture(str(future))
    with pytest.raises(ZfsobsError, match="no such file"):
        read_capture(str(tmp_path / "missing"))
    with pytest.raises(ZfsobsError, match="directory"):
        read_capture(str(tmp_path))


def test_no_trailer_is_a_warning_not_an_error(tmp_path):
    path = tmp_path / "c.cap"
    write(path, [lines(4)], trailer=False)
    cap = read_capture(str(path))
    assert cap.lines == lines(4) and cap.trailer is None
    assert any("did not end cleanly" in w for w in cap.warnings)


@contextlib.contextmanager
def small_tmpfs(where, size="64k"):
    """A real filesystem of `size` (root: mount)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (mount)")
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "zfsobs-test-full", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_disk_full_stops_with_a_clear_error_and_a_valid_file(tmp_path):
    """A real full filesystem (a 64 KiB tmpfs): the error names the file, the records written are whole."""
    with small_tmpfs(tmp_path / "small") as small:
        path = small / "full.cap"
        w = CaptureWriter(str(path), META)
        batches = 0
        with pytest.raises(ZfsobsError, match=f"^{path}: disk full; capture stopped, it is valid up to here$"):
            while batches < 10_000:       # random text barely compresses: 64 KiB fill in a few batches
                for line in lines(20, batches * 20):
                    w.add(line + " note=" + os.urandom(400).hex())
                w.flush()
                batches += 1
        w.abandon()
        cap = read_capture(str(path))
        assert batches >= 1 and len(cap.lines) == 20 * batches
        assert cap.warnings == ["no trailer: the recording did not end cleanly (data up to the last flush is here)"]


def as_nobody(*cmd):
    subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *cmd], check=True)


@pytest.fixture
def victim(tmp_path):
    """A root-owned file, mode 0644, and a symlink to it that user nobody made in /tmp (sticky, shared)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (a symlink made by nobody)")
    target = tmp_path / "precious"
    target.write_text("root's data\n")
    os.chmod(target, 0o644)
    link = f"/tmp/zfsobs-test-{os.getpid()}-{uuid.uuid4().hex}.cap"
    as_nobody("ln", "-s", str(target), link)
    try:
        yield target, link
    finally:
        os.unlink(link)


def test_force_never_writes_through_a_symlink(victim):
    target, link = victim
    with pytest.raises(ZfsobsError, match=f"^-O {link}: not a regular file$"):
        CaptureWriter(link, META, force=True)
    with pytest.raises(ZfsobsError, match="exists"):
        CaptureWriter(link, META)
    assert target.read_text() == "root's data\n" and stat.S_IMODE(os.stat(target).st_mode) == 0o644
    assert os.path.islink(link)
    res = subprocess.run([sys.executable, "-m", "zfsobs", "record", "--lab", "-O", link, "--force"],
                         capture_output=True, text=True, timeout=60)
    assert (res.returncode, res.stderr) == (2, f"zfsobs: -O {link}: not a regular file\n")
    assert target.read_text() == "root's data\n" and stat.S_IMODE(os.stat(target).st_mode) == 0o644


@pytest.mark.parametrize("device", ["/dev/null", "/dev/full"])
def test_force_never_touches_a_device(device):
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    before = os.stat(device)
    with pytest.raises(ZfsobsError, match=f"^-O {device}: not a regular file$"):
        CaptureWriter(device, META, force=True)
    res = subprocess.run([sys.executable, "-m", "zfsobs", "record", "--lab", "-O", device, "--force"],
                         capture_output=True, text=True, timeout=60)
    assert (res.returncode, res.stderr) == (2, f"zfsobs: -O {device}: not a regular file\n")
    after = os.stat(device)
    assert (after.st_mode, after.st_uid, after.st_rdev) == (before.st_mode, before.st_uid, before.st_rdev)
    assert stat.S_IMODE(after.st_mode) == 0o666


def test_force_replaces_the_name_not_a_hard_link_s_file(tmp_path):
    """--force writes a new file and renames it over the old name: another link keeps its data."""
    old, other = tmp_path / "old.cap", tmp_path / "other"
    old.write_text("old\n")
    os.link(old, other)
    w = CaptureWriter(str(old), META, force=True)
    for line in lines(3):
        w.add(line)
    w.close({"reason": "test"})
    assert other.read_text() == "old\n" and read_capture(str(old)).lines == lines(3)
    assert sorted(os.listdir(tmp_path)) == ["old.cap", "other"]
