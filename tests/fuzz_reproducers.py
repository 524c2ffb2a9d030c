"""The hostile captures of issue 41's findings 6 and 7, each a few hundred bytes: built here,
committed in tests/data/fuzz-corpus/ (scripts/fuzz --reproducers writes them again), replayed by
tests/test_fuzz_corpus.py under a memory and time bound."""
from __future__ import annotations

import json
import struct

from zfsobs.capture.format import FILE_MAGIC, _FILE_HEAD, deflate, lines_body, record

HEAD = _FILE_HEAD.pack(FILE_MAGIC, 3) + record(b"H", deflate(b'{"format": "zfsobs-capture", "version": 3}'))
TRAILER = record(b"T", deflate(b"{}"))


def _lines(kind: bytes, seq: int, low: int, high: int, payload: bytes) -> bytes:
    return record(kind, struct.pack("<Iqq", seq, low, high) + deflate(payload))


def packed_bomb() -> bytes:
    """One packed V record: one long template, a line per zero byte: 14 GB of text from 300 bytes."""
    n = 120_000
    payload = f"1 {n} 0 0\n".encode() + b"zfsobs 1 vq " + b"x" * n + b"\n" + bytes(n)
    return HEAD + _lines(b"V", 0, 0, 0, payload) + TRAILER


def text_bomb() -> bytes:
    """One text E record of 200 MiB of newlines: 200 M lines."""
    return HEAD + _lines(b"E", 0, 0, 0, b"\n" * (200 << 20)) + TRAILER


def equal_ts() -> bytes:
    """Records whose events all share one ts: every event held until the end."""
    line = b"zfsobs 1 x 5 a=1 b=2 c=3 d=4\n"     # a kind no model keeps: only the reader's holding costs
    return HEAD + b"".join(_lines(b"E", i, 5, 5, line * 40_000) for i in range(20)) + TRAILER


def far_apart(kind: str = "txg") -> bytes:
    """Two events 10^18 ns (31 years) apart: openmetrics' steps, compare's bins."""
    lines = {"txg": ["zfsobs 1 txg 0 pool=p txg=1 start=0 sync_ns=1", "zfsobs 1 txg 1000000000000000000 pool=p txg=2 "
                     "start=0 sync_ns=1"],
             "vq": ["zfsobs 1 vq 0 pool=p pid=1 vd=0xa class=0 pend=1 act=1 pend_max=1 act_max=1 enq=1 done=0",
                    "zfsobs 1 txg 1000000000000000000 pool=p txg=2 start=0 sync_ns=1"]}[kind]
    return HEAD + b"".join(_lines(b"E", i, 0, 10**18, (line + "\n").encode()) for i, line in enumerate(lines)) + TRAILER


def resync(size: int = 64 << 10) -> bytes:
    """Damage made of record heads, each claiming a body as long as the rest of the file."""
    head = HEAD
    out = bytearray(head)
    step = 11
    while len(out) < size:
        out += struct.pack("<2scII", b"ZR", b"E", max(0, size - len(out) - step), 0)
    return bytes(out[:size]) + TRAILER


def nested(kind: bytes) -> bytes:
    """A header, trailer or digest that is JSON nested 100,000 deep."""
    deep = b"[" * 100_000 + b"]" * 100_000
    if kind == b"H":
        return _FILE_HEAD.pack(FILE_MAGIC, 3) + record(b"H", deflate(b'{"x": ' + deep + b"}")) + TRAILER
    if kind == b"T":
        return HEAD + record(b"T", deflate(b'{"x": ' + deep + b"}"))
    return HEAD + record(b"G", deflate(b'{"seqs": ' + deep + b', "lines": 1, "picked": 0}\n')) + TRAILER


def line(text: str) -> bytes:
    """One E record of one event line."""
    return HEAD + _lines(b"E", 0, 0, 0, (text + "\n").encode()) + TRAILER


REPRODUCERS = {
    "6-packed-bomb": packed_bomb,
    "6-text-bomb": text_bomb,
    "6-equal-ts": equal_ts,
    "6-openmetrics-far-apart": far_apart,
    "6-compare-far-apart": lambda: far_apart("vq"),
    "6-resync": resync,
    "7-nested-header": lambda: nested(b"H"),
    "7-nested-trailer": lambda: nested(b"T"),
    "7-nested-digest": lambda: nested(b"G"),
    "7-sync-ns-u64": lambda: line("zfsobs 1 txg 5 pool=p txg=1 start=1 sync_ns=18446744073709551615"),
    "7-int-past-float": lambda: line("zfsobs 1 txg 5 pool=p txg=1 start=1 sync_ns=1 dirty=" + "9" * 400),
    "7-ts-past-int64": lambda: line("zfsobs 1 txg 99999999999999999999 pool=p txg=1 start=1 sync_ns=1"),
}


def write_all(directory: str) -> None:
    for name, make in REPRODUCERS.items():
        with open(f"{directory}/{name}.cap", "wb") as f:
            f.write(make())
