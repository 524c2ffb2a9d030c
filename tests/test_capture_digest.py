"""Digests (zfsobs/capture/digest.py): a report that reads them instead of the V records they cover
is the same report, on real lab captures and through damage; captures of format 1 still read.
The fuzz tests (test_capture_fuzz.py) check the same claim on drawn counter lines."""
from __future__ import annotations

import pytest

from conftest import recorded_capture
from zfsobs.capture import CaptureWriter, read_capture
from zfsobs.capture.format import _REC_HEAD, RECORD_MAGIC
from zfsobs.events import Parser
from zfsobs.views import report

REAL = [recorded_capture(), "tests/data/vdev-cache-2.1.11.cap", "tests/data/kstat-2.1.11.cap"]


def rewrite(src: str, dst, per_record: int, per_span: int, close: bool = True) -> None:
    """A format-1 capture recorded from a real run, written again as the session writes it now."""
    old = read_capture(src)
    w, parser = CaptureWriter(str(dst), old.meta, force=True), Parser()
    for i, line in enumerate(old.lines):
        w.add(line, parser.parse(line))
        if i % per_record == per_record - 1:
            w.flush(span_end=(i // per_record) % per_span == per_span - 1)
    if close:
        w.close(old.trailer or {})
    else:
        w.flush()
        w.abandon()


def both(path) -> tuple[dict, dict]:
    """(report with digests, report reading every line)."""
    with_digests = report.as_dict(read_capture(str(path)))
    cap = read_capture(str(path))
    return with_digests, report.as_dict(cap, report.build(cap, samples=False, digests=False))


def records(path, kind: bytes) -> list[int]:
    """Offsets of the records of one kind."""
    data, pos, out = path.read_bytes(), 10, []
    while pos < len(data):
        magic, k, length, _ = _REC_HEAD.unpack_from(data, pos)
        assert magic == RECORD_MAGIC
        if k == kind:
            out.append(pos)
        pos += _REC_HEAD.size + length
    return out


@pytest.mark.parametrize("src", REAL)
@pytest.mark.parametrize("per_record,per_span", [(40, 1), (100, 3), (400, 2)])
def test_the_report_from_digests_is_the_report_from_every_line(src, per_record, per_span, tmp_path):
    path = tmp_path / "x.cap"
    rewrite(src, path, per_record, per_span)
    cap = read_capture(str(path))
    assert cap.digests, "no digest written"
    parser = Parser()
    parsed = sum(1 for _ in cap.events(parser, digests=True))
    stood_for = sum(h["lines"] - h["picked"] for _, _, h in cap.digests)
    assert stood_for > 0 and parsed < parser.events
    digested, full = both(path)
    assert digested == full
    # and the same as format 1 read it, but for the header's version
    old = report.as_dict(read_capture(src))
    assert old["meta"].pop("version") == 1 and full["meta"].pop("version") == 3
    for d in (old, full):
        d["meta"].pop("warnings")
        d["meta"].pop("trailer")
    assert old == full


def test_a_damaged_digest_costs_nothing(tmp_path):
    """Its V records are read instead: the same report, and a warning."""
    path = tmp_path / "x.cap"
    rewrite(recorded_capture(), path, 40, 2)
    clean = both(path)[1]
    data = bytearray(path.read_bytes())
    for pos in records(path, b"G")[::2]:
        data[pos + _REC_HEAD.size + 3] ^= 0x40
    path.write_bytes(bytes(data))
    digested, full = both(path)
    assert digested == full and digested["vdev_queue"] == clean["vdev_queue"]
    assert any("damaged record(s) skipped" in w for w in digested["meta"]["warnings"])


def test_a_damaged_record_a_digest_covers_costs_only_its_lines_to_replay(tmp_path):
    """The digest still stands for the V record: the report keeps its counts; replay (every line)
    loses that record's lines only."""
    path = tmp_path / "x.cap"
    rewrite(recorded_capture(), path, 40, 3)
    before = read_capture(str(path))
    clean, lines = report.as_dict(before), len(before.lines)
    data = bytearray(path.read_bytes())
    pos = records(path, b"V")[5]
    data[pos + _REC_HEAD.size + 20] ^= 0x01
    path.write_bytes(bytes(data))
    after = read_capture(str(path))
    got = report.as_dict(after)
    assert got["vdev_queue"] == clean["vdev_queue"] and got["txgs"] == clean["txgs"]
    assert 0 < lines - len(after.lines) < 100


def test_a_capture_cut_before_its_last_digest_reads_the_rest_line_by_line(tmp_path):
    """SIGKILL: no trailer and no digest for the last span; its V records are parsed."""
    path = tmp_path / "x.cap"
    rewrite(recorded_capture(), path, 40, 4, close=False)
    cap = read_capture(str(path))
    covered = {s for _, _, h in cap.digests for s in range(h["seqs"][0], h["seqs"][1] + 1)}
    assert cap.digests and any(s not in covered for s, k in zip(cap.seqs, cap.kinds) if k == ord("V"))
    digested, full = both(path)
    assert digested == full and digested["meta"]["events"] == len(cap.lines)
