"""Capture files: round trip, crash damage, foreign and future files, permissions."""
import os
import stat
import struct

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


def test_disk_full_stops_with_a_clear_error_and_a_valid_file(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    # /dev/full fails every write with ENOSPC, like a full filesystem
    with pytest.raises(ZfsobsError, match="disk full"):
        CaptureWriter("/dev/full", META, force=True)
