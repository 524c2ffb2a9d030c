"""Capture files: append-only, self-describing, compressed, readable after a crash.

Layout: FILE_MAGIC + u16 format version, then records. A record is
    b"ZR" | kind (1 byte: H header, E events, T trailer) | u32 length | u32 crc32 | zlib payload
written with one os.write each, at least once a second. A torn or damaged record is skipped, so a
capture killed with SIGKILL loses at most the records not yet written. Payloads are JSON (H, T) or
event lines (E): replay re-parses the same lines the live view parsed, through the same code.
"""
from __future__ import annotations

import errno
import json
import os
import struct
import time
import zlib
from dataclasses import dataclass, field

from zfsobs.errors import ZfsobsError
from zfsobs.signals import whole

FORMAT_NAME = "zfsobs-capture"
FORMAT_VERSION = 1
FILE_MAGIC = b"\x89ZFSOBS\n"
RECORD_MAGIC = b"ZR"
_FILE_HEAD = struct.Struct("<8sH")
_REC_HEAD = struct.Struct("<2scII")
MAX_RECORD = 64 << 20      # a larger length field is damage, not data
MAX_PAYLOAD = 256 << 20
FLUSH_SECONDS = 1.0
FLUSH_BYTES = 1 << 20
# Header fields the views read, and their types: one of another type is damage (or another
# tool's), left out with a warning rather than failing a view.
HEADER_TYPES = {"target": dict, "lab": dict, "probes": dict, "unavailable": dict, "tunables": dict,
                "pools": list, "tunables_watched": list, "start_wall_ns": int, "start_mono_ns": int}


class CaptureWriter:
    """Tee for the event stream. `add(line)` buffers; `tick()` writes a record when one is due."""

    def __init__(self, path: str, meta: dict, force: bool = False):
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
        try:
            self._fd = os.open(path, flags, 0o600)
        except FileExistsError:
            raise ZfsobsError(f"{path}: exists; choose another name or pass --force") from None
        except OSError as exc:
            raise ZfsobsError(f"{path}: cannot create capture: {exc.strerror}") from None
        os.fchmod(self._fd, 0o600)   # also when --force reuses a file with looser bits
        self._buf: list[str] = []
        self._size = 0
        self._last = time.monotonic()
        self.lines = 0
        self.bytes = 0
        self._write(b"", _FILE_HEAD.pack(FILE_MAGIC, FORMAT_VERSION))
        self._record(b"H", json.dumps(dict(meta, format=FORMAT_NAME, version=FORMAT_VERSION)).encode())

    def add(self, line: str) -> None:
        self._buf.append(line)
        self._size += len(line) + 1
        if self._size >= FLUSH_BYTES:
            self.flush()

    def tick(self) -> None:
        if self._buf and time.monotonic() - self._last >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        self._last = time.monotonic()
        if not self._buf:
            return
        # whole: a SIGTERM between the write and emptying the buffer would lose or repeat lines
        with whole():
            payload = ("\n".join(self._buf) + "\n").encode()
            count = len(self._buf)
            self._buf, self._size = [], 0
            self._record(b"E", payload)
            self.lines += count

    def close(self, trailer: dict) -> None:
        if self._fd is None:
            return
        with whole():
            try:
                self.flush()
                self._record(b"T", json.dumps(dict(trailer, lines=self.lines)).encode())
                os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = None

    def abandon(self) -> None:
        """Close without a trailer (after a write error): what was written stays readable."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _record(self, kind: bytes, payload: bytes) -> None:
        body = zlib.compress(payload, 6)
        head = _REC_HEAD.pack(RECORD_MAGIC, kind, len(body), zlib.crc32(kind + body))
        self._write(head, body)

    def _write(self, head: bytes, body: bytes) -> None:
        data = head + body
        start = os.lseek(self._fd, 0, os.SEEK_CUR)
        try:
            done = os.write(self._fd, data)
            if done != len(data):
                raise OSError(errno.ENOSPC, "short write")
        except OSError as exc:
            # Like atop: cut a partial record off so the file ends on a record boundary.
            try:
                os.ftruncate(self._fd, start)
                os.lseek(self._fd, start, os.SEEK_SET)
            except OSError:
                pass
            reason = "disk full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else exc.strerror
            raise ZfsobsError(f"{self.path}: {reason}; capture stopped, it is valid up to here") from None
        self.bytes += len(data)


@dataclass
class Capture:
    path: str
    meta: dict
    lines: list[str]
    trailer: dict | None
    warnings: list[str] = field(default_factory=list)


def read_capture(path: str) -> Capture:
    """Read a whole capture. Damage yields warnings and a readable prefix; never an exception
    other than ZfsobsError (missing, foreign or too-new files)."""
    try:
        with open(path, "rb") as f:
            data = f.read(len(FILE_MAGIC))     # first: a device like /dev/zero never ends
            if data == FILE_MAGIC:
                data += f.read()
    except FileNotFoundError:
        raise ZfsobsError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ZfsobsError(f"{path}: is a directory, not a capture") from None
    except OSError as exc:
        raise ZfsobsError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) < _FILE_HEAD.size or data[:8] != FILE_MAGIC:
        raise ZfsobsError(f"{path}: not a zfsobs capture (no {FORMAT_NAME} signature)")
    _, version = _FILE_HEAD.unpack_from(data)
    if version > FORMAT_VERSION:
        raise ZfsobsError(f"{path}: capture format {version} is newer than this zfsobs reads "
                          f"({FORMAT_VERSION}); upgrade zfsobs")
    meta, trailer, lines, warnings = None, None, [], []
    pos, skipped = _FILE_HEAD.size, 0
    while pos < len(data):
        record = _record_at(data, pos)
        if record is None:
            nxt = data.find(RECORD_MAGIC, pos + 1)
            if nxt < 0:
                warnings.append(f"last {len(data) - pos} bytes are an incomplete record (ignored)")
                break
            skipped += 1
            pos = nxt
            continue
        kind, payload, pos = record
        if kind == b"H" and meta is None:
            meta = _json(payload)
        elif kind == b"E":
            lines.extend(payload.decode("utf-8", "replace").splitlines())
        elif kind == b"T":
            trailer = _json(payload)
    if skipped:
        warnings.append(f"{skipped} damaged record(s) skipped")
    if meta is None:
        raise ZfsobsError(f"{path}: capture header missing or damaged; nothing readable")
    for key, kind in HEADER_TYPES.items():
        if key in meta and (not isinstance(meta[key], kind) or isinstance(meta[key], bool)):
            warnings.append(f"header field {key!r} is not a {kind.__name__} (ignored)")
            del meta[key]
    if trailer is None:
        warnings.append("no trailer: the recording did not end cleanly (data up to the last flush is here)")
    return Capture(path, meta, lines, trailer, warnings)


def _record_at(data: bytes, pos: int):
    if pos + _REC_HEAD.size > len(data):
        return None
    magic, kind, length, crc = _REC_HEAD.unpack_from(data, pos)
    start = pos + _REC_HEAD.size
    end = start + length
    if magic != RECORD_MAGIC or length > MAX_RECORD or end > len(data):
        return None
    body = data[start:end]
    if zlib.crc32(kind + body) != crc:
        return None
    try:
        inflater = zlib.decompressobj()
        payload = inflater.decompress(body, MAX_PAYLOAD)
    except zlib.error:
        return None
    if inflater.unconsumed_tail:      # a record that inflates past any sane size is damage
        return None
    return kind, payload, end


def _json(payload: bytes) -> dict | None:
    try:
        value = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None
