"""Format 3's packed V records (zfsobs/capture/packed.py): every line comes back as it was written,
on the real recorded captures and on awkward and random lines; a packed payload that was not made
by pack (damage behind an intact CRC) reads as a damaged record, never an exception."""
from __future__ import annotations

import glob
import os
import zlib
from collections import Counter

import pytest

from conftest import DATA
from zfsobs.capture import CaptureWriter, read_capture
from zfsobs.capture.digest import digestible
from zfsobs.capture.format import FEW, RECORD_MAGIC, _REC_HEAD, deflate, lines_payload, payload_lines
from zfsobs.capture.packed import ESC, pack, packable, unpack
from zfsobs.events import Parser
from zfsobs.views import report

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st   # noqa: E402

REAL = sorted(glob.glob(os.path.join(DATA, "*.cap")))
CASES = int(os.environ.get("ZFSOBS_FUZZ_CASES") or 600)
FUZZ = settings(max_examples=CASES, deadline=None, derandomize=bool(os.environ.get("CI")))


def v_records(cap) -> list[list[str]]:
    """The counter lines as the writer would put them in V records: a record per second."""
    parser, seconds = Parser(), {}
    for line in cap.lines:
        ev = parser.parse(line)
        if ev is not None and digestible(ev) and packable(line):
            seconds.setdefault(ev.ts // 10**9, []).append(line)
    return list(seconds.values())


@pytest.mark.parametrize("src", REAL, ids=os.path.basename)
def test_every_recorded_counter_line_packs_to_fewer_bytes_and_back(src):
    records = v_records(read_capture(src))
    assert len(records) > 5
    text = packed = 0
    for lines in records:
        assert unpack(pack(lines)) == lines
        payload = lines_payload(lines, packed=True)
        assert payload_lines(zlib.decompress(payload), packed=True) == lines
        text += len(zlib.compress(("\n".join(lines) + "\n").encode(), 6))
        packed += len(payload)
    # a record of a few lines keeps its text where packing would not pay
    assert packed < text if max(map(len, records)) >= FEW else packed <= text


@pytest.mark.parametrize("src", REAL, ids=os.path.basename)
def test_a_capture_written_again_reads_the_same_lines_and_report(src, tmp_path):
    old = read_capture(src)
    path = tmp_path / "again.cap"
    w, parser = CaptureWriter(str(path), old.meta, force=True), Parser()
    for i, line in enumerate(old.lines):
        w.add(line, parser.parse(line))
        if i % 300 == 299:
            w.flush(span_end=i % 3000 == 2999)
    w.close(old.trailer or {})
    new = read_capture(str(path))
    assert new.version == 3 and new.warnings == []
    assert any(k == ord("V") for k in new.kinds) == any(k == ord("V") for k in old.kinds) or old.version == 1
    assert Counter(new.lines) == Counter(old.lines)
    mine, theirs = report.as_dict(new), report.as_dict(old)
    for d in (mine, theirs):
        for key in ("version", "warnings", "trailer"):
            d["meta"].pop(key)
    assert mine == theirs


AWKWARD = [
    "zfsobs 1 vq 100 pool=p pid=7 vd=0xa class=2 pend=0 act=-1 enq=007 done=-0 x=10 y=-10",
    "zfsobs 1 vq 100 pool=p pid=7 vd=0xa class=2 pend=999999999999999999 act=-999999999999999999 enq=1000000000000000000",
    "zfsobs 1 vq 100 pool=p pid=7 vd=0xa class=2 pend=18446744073709551615 act=-9223372036854775808",
    "zfsobs 1 vq notanumber pool=p a=b=5 =5 c= =  d=1",
    "zfsobs 1 vq 5  double  spaces=3 trailing=4 ",
    "zfsobs",
    "zfsobs 1",
    "zfsobs 1 vq",
    "zfsobs 1 vq 17",
    "zfsobs 1 vq -17 é=1 名=2 path=/dev/d 1",
    "zfsobs 1 vq 0 pool=12 pid=3 vd=4 class=5 kind=6 guid=7 path=8 other=9",
    "",
    " ",
]


def test_awkward_lines_come_back_as_written():
    assert all(packable(line) for line in AWKWARD)
    for lines in (AWKWARD, AWKWARD * 3, list(reversed(AWKWARD)), []):
        assert unpack(pack(lines)) == lines


def test_more_templates_and_changes_than_a_byte_holds():
    """Template indices past 254 and changes past a byte go out of line (ESC), in order."""
    lines = [f"zfsobs 1 vq {10**15 + i * 7} pool=p pid={i} vd=0x{i:x} class=1 n={i * 1000} m={-i}"
             for i in range(3 * ESC)] * 2
    assert len(set(unpack(pack(lines)))) == 3 * ESC and unpack(pack(lines)) == lines


def test_unprintable_lines_are_not_packed_and_go_to_e_records(tmp_path):
    line = "zfsobs 1 vq 100 pool=p pid=7 vd=0xa class=2 final=0 pend=1 act=0 path=/dev/a\tb"
    assert not packable(line) and not packable("a\x00b") and not packable("a\x85b")
    path = tmp_path / "c.cap"
    w = CaptureWriter(str(path), {})
    w.add(line, Parser().parse(line))
    w.close({})
    cap = read_capture(str(path))
    assert cap.lines == [line] and bytes(cap.kinds) == b"E"


WORD = st.text(st.characters(min_codepoint=32, max_codepoint=0x3FF), max_size=8).filter(str.isprintable)
NUMBER = st.one_of(st.integers(-300, 300), st.integers(-(1 << 66), 1 << 66)).map(str)
TOKEN = st.one_of(NUMBER, WORD, st.tuples(st.sampled_from(["pool", "pid", "vd", "n", "m", "b0", ""]),
                                          st.one_of(NUMBER, WORD)).map("=".join))
LINE = st.lists(TOKEN, max_size=10).map(" ".join).filter(str.isprintable)


@FUZZ
@given(lines=st.lists(st.one_of(LINE, st.sampled_from(AWKWARD)), max_size=40))
def test_any_printable_lines_come_back_as_written(lines):
    assert unpack(pack(lines)) == lines


BASE = pack([f"zfsobs 1 vq {100 + i} pool=p pid=1 vd=0x{i % 3:x} class={i % 2} n={i * i} m={300 - i}"
             for i in range(30)])


@FUZZ
@given(data=st.data())
def test_a_payload_pack_did_not_make_is_none_or_lines(data):
    blob = bytearray(BASE)
    for _ in range(data.draw(st.integers(1, 6))):
        how = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        i = data.draw(st.integers(0, len(blob)))
        if how == "flip" and i < len(blob):
            blob[i] ^= 1 << data.draw(st.integers(0, 7))
        elif how == "cut":
            del blob[i:i + data.draw(st.integers(1, 20))]
        else:
            blob[i:i] = data.draw(st.binary(min_size=1, max_size=20))
    got = unpack(bytes(blob))
    assert got is None or all(isinstance(line, str) for line in got)


def test_a_v_record_damaged_behind_its_crc_costs_only_itself(tmp_path):
    path = tmp_path / "c.cap"
    src = read_capture(sorted(glob.glob(os.path.join(DATA, "lab-*.cap")))[-1])
    w, parser = CaptureWriter(str(path), src.meta), Parser()
    for i, line in enumerate(src.lines[:2000]):
        w.add(line, parser.parse(line))
        if i % 200 == 199:
            w.flush()
    w.close({})
    before = read_capture(str(path)).lines
    data, pos, hit = bytearray(path.read_bytes()), 10, None
    while pos < len(data):
        magic, kind, length, _ = _REC_HEAD.unpack_from(data, pos)
        assert magic == RECORD_MAGIC
        if kind == b"V" and hit is None:
            hit = pos
        pos += _REC_HEAD.size + length
    magic, kind, length, _ = _REC_HEAD.unpack_from(data, hit)
    body = bytes(data[hit + _REC_HEAD.size:hit + _REC_HEAD.size + length])
    head, payload = body[:20], zlib.decompress(body[20:])
    bad = head + deflate(payload.replace(b"\n", b" ", 1))      # its counts line run into a template
    data[hit:hit + _REC_HEAD.size + length] = _REC_HEAD.pack(RECORD_MAGIC, kind, len(bad), zlib.crc32(kind + bad)) + bad
    path.write_bytes(bytes(data))
    after = read_capture(str(path))
    lost = len(unpack(payload))
    assert lost > 0 and Counter(after.lines) == Counter(before) - Counter(unpack(payload))
    assert any("do not inflate or unpack" in w for w in after.warnings)
    report.render(after, "json", "txgs")
