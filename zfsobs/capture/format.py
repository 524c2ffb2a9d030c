"""The capture file's framing (docs/capture.md): the file head, and records that each stand alone.

    FILE_MAGIC | u16 version, then records:  b"ZR" | kind | u32 length | u32 crc32(kind + body) | body

Version 1 bodies are zlib payloads. Version 2 line records (E: every line but the digested
counters, V: those counters) start with a plain u32 sequence number and the i64 lowest and highest
event ts, so a reader can order and skip them without inflating them; G (digest) records say what a report needs
of a span of V records (zfsobs/capture/digest.py). Version 3 packs a V record's lines before zlib
(zfsobs/capture/packed.py): the same lines back, in about half the bytes.
"""
from __future__ import annotations

import json
import struct
import zlib

from zfsobs.capture.packed import pack, unpack

FORMAT_NAME = "zfsobs-capture"
FORMAT_VERSION = 3
FILE_MAGIC = b"\x89ZFSOBS\n"
RECORD_MAGIC = b"ZR"
_FILE_HEAD = struct.Struct("<8sH")
_REC_HEAD = struct.Struct("<2scII")
LINES_HEAD = struct.Struct("<Iqq")     # v2 E and V bodies: sequence number, lowest and highest event ts
NO_TS = (1 << 63) - 1                  # a record with no event (only malformed lines)
# Bounds (docs/capture.md, "Bounds"): the writer flushes a record at 1 MiB of text (FLUSH_BYTES), so
# a record past these is damage or hostile, skipped and counted, never expanded.
MAX_PAYLOAD = 16 << 20     # bytes a record's payload inflates (or a packed one unpacks) to
MAX_RECORD = MAX_PAYLOAD + (1 << 20)    # a larger length field is damage, not data
MAX_LINES = 1 << 17        # lines a record holds
MAX_DEPTH = 32             # nesting of a header's, trailer's or digest's JSON
FEW = 32                   # a packed record of fewer lines keeps its text if that is smaller
LINE_KINDS = (b"E", b"V")
# Header fields the views read, and their types: one of another type is damage (or another
# tool's), left out with a warning rather than failing a view.
HEADER_TYPES = {"target": dict, "lab": dict, "probes": dict, "unavailable": dict, "tunables": dict,
                "pools": list, "tunables_watched": list, "start_wall_ns": int, "start_mono_ns": int}


def record(kind: bytes, body: bytes) -> bytes:
    return _REC_HEAD.pack(RECORD_MAGIC, kind, len(body), zlib.crc32(kind + body)) + body


def lines_body(seq: int, low_ts: int, high_ts: int, lines: list[str], packed: bool = False) -> bytes:
    low, high = (max(-NO_TS, min(t, NO_TS)) for t in (low_ts, high_ts))
    return LINES_HEAD.pack(seq & 0xFFFFFFFF, low, high) + lines_payload(lines, packed)


def lines_payload(lines: list[str], packed: bool = False) -> bytes:
    """A line record's zlib payload: its lines as text, or packed (a V record, format 3); a record of
    a few lines keeps its text where that is smaller. Text starts with "zfsobs", a packed payload
    with a digit."""
    text = deflate(("\n".join(lines) + "\n").encode()) if not packed or len(lines) < FEW else None
    if not packed:
        return text
    packed_payload = deflate(pack(lines))
    if text is not None and len(text) < len(packed_payload) and lines and lines[0].startswith("zfsobs"):
        return text
    return packed_payload


def payload_lines(payload: bytes, packed: bool = False) -> list[str] | None:
    """The lines of an inflated line record's payload (`packed`: a V record of format 3, which may
    hold text), or None for damage."""
    if packed and not payload.startswith(b"zfsobs"):
        return unpack(payload, MAX_LINES, MAX_PAYLOAD)
    if payload.count(b"\n") > MAX_LINES:
        return None
    lines = payload.decode("utf-8", "replace").splitlines()
    return lines if len(lines) <= MAX_LINES else None     # other line breaks: \r, \x1c, \u2028


def deflate(payload: bytes) -> bytes:
    return zlib.compress(payload, 6)


def inflate(body: bytes) -> bytes | None:
    """The payload, or None for damage (a record that inflates past any sane size is damage)."""
    try:
        inflater = zlib.decompressobj()
        payload = inflater.decompress(body, MAX_PAYLOAD)
    except zlib.error:
        return None
    return None if inflater.unconsumed_tail else payload


def as_json(payload: bytes | str | None) -> dict | None:
    """A JSON object nested at most MAX_DEPTH deep, or None (damage)."""
    try:
        value = json.loads(payload)
    except (TypeError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) and shallow(value) else None


def shallow(value, depth: int = MAX_DEPTH) -> bool:
    """Whether value's lists and dicts nest at most `depth` deep (walked without recursion)."""
    level = [value]
    for _ in range(depth):
        level = [x for v in level for x in (v.values() if isinstance(v, dict) else v)
                 if isinstance(x, (dict, list))]
        if not level:
            return True
    return False
