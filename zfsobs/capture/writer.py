"""Writing captures: append-only, self-describing, compressed, readable after a crash.

Records (zfsobs/capture/format.py) are written with one os.write each, at least once a second, so a
capture killed with SIGKILL loses at most the lines of the last second. Lines are the event lines
exactly as the live view parsed them: replay re-parses them through the same code. The counter lines
(vq, vq_lat, vq_vdev, vc) go to V records, packed as columns of changes (zfsobs/capture/packed.py),
and every other line to E records; every few minutes a G record digests the V records since the
last one (zfsobs/capture/digest.py).
"""
from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
import time

from zfsobs.capture.digest import SPAN_SECONDS, Digest, digestible
from zfsobs.capture.format import (FILE_MAGIC, FORMAT_NAME, FORMAT_VERSION, NO_TS, _FILE_HEAD, deflate,
                                   lines_body, record)
from zfsobs.capture.packed import packable
from zfsobs.errors import ZfsobsError
from zfsobs.events import Event, low_ts
from zfsobs.signals import whole

FLUSH_SECONDS = 1.0
FLUSH_BYTES = 1 << 20


class _Lines:
    """Lines waiting for their record, and their lowest and highest event ts."""

    def __init__(self):
        self.lines: list[str] = []
        self.size = 0
        self.low = NO_TS
        self.high = -NO_TS


def _create(path: str, force: bool) -> int:
    """A new file at `path`, mode 0600, for writing. Without --force it must not exist; with it,
    only a regular file is replaced, by a new one written beside it (O_EXCL) and renamed over it:
    never a symlink's target, a device or another name's link to the old file, and no mode
    change to anything but the file made here."""
    try:
        if not force:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                raise ZfsobsError(f"-O {path}: not a regular file")
        except FileNotFoundError:
            pass
        parent, name = os.path.split(os.path.abspath(path))
        fd, new = tempfile.mkstemp(prefix=f".{name}.", dir=parent)     # O_EXCL, O_NOFOLLOW, 0600
        try:
            os.rename(new, path)
        except OSError:
            os.close(fd)
            os.unlink(new)
            raise
        return fd
    except FileExistsError:
        raise ZfsobsError(f"{path}: exists; choose another name or pass --force") from None
    except OSError as exc:
        raise ZfsobsError(f"{path}: cannot create capture: {exc.strerror}") from None


class CaptureWriter:
    """Tee for the event stream. `add(line, event)` buffers; `tick()` writes records when due."""

    def __init__(self, path: str, meta: dict, force: bool = False, span_s: float = SPAN_SECONDS):
        self.path = path
        self._fd = _create(path, force)
        self._buf = {b"E": _Lines(), b"V": _Lines()}
        self._seq = 0
        self._digest = Digest()
        self._span_s = span_s
        self._last = time.monotonic()
        self._high_ts = 0
        self.lines = 0
        self.bytes = 0
        self._write(_FILE_HEAD.pack(FILE_MAGIC, FORMAT_VERSION))
        self._write(record(b"H", deflate(json.dumps(dict(meta, format=FORMAT_NAME, version=FORMAT_VERSION)).encode())))

    def add(self, line: str, ev: Event | None = None) -> None:
        """An event line as received; `ev` is its parse (None: malformed, or not known)."""
        kind = b"V" if ev is not None and digestible(ev) and packable(line) else b"E"
        buf = self._buf[kind]
        buf.lines.append(line)
        buf.size += len(line) + 1
        if ev is not None:
            buf.low, buf.high = min(buf.low, ev.ts), max(buf.high, ev.ts)
            self._high_ts = max(self._high_ts, ev.ts)
            if kind == b"V":
                self._digest.add(line, ev)
        else:        # a reader's parse may still find a ts in it (e.g. a caller that parsed nothing)
            ts = low_ts([line])
            if ts != float("inf"):
                buf.low, buf.high = min(buf.low, ts), max(buf.high, ts)
        if buf.size >= FLUSH_BYTES:
            self.flush()

    def tick(self) -> None:
        if time.monotonic() - self._last >= FLUSH_SECONDS and any(b.lines for b in self._buf.values()):
            self.flush()

    def flush(self, span_end: bool = False) -> None:
        self._last = time.monotonic()
        # whole: a SIGTERM between the write and emptying the buffer would lose or repeat lines
        with whole():
            for kind, buf in self._buf.items():
                if buf.lines:
                    self._write(record(kind, lines_body(self._seq, buf.low, buf.high, buf.lines, kind == b"V")))
                    if kind == b"V":
                        self._digest.covered(self._seq)
                    self._seq += 1
                    self.lines += len(buf.lines)
                    self._buf[kind] = _Lines()
            # spans in event time: a digest every span_s of what was recorded, replayed or not
            if span_end or self._high_ts - self._digest.low >= self._span_s * 1e9:
                digest = self._digest.take(self._high_ts)
                if digest is not None:
                    self._write(record(b"G", deflate(digest)))

    def close(self, trailer: dict) -> None:
        if self._fd is None:
            return
        with whole():
            try:
                self.flush(span_end=True)
                self._write(record(b"T", deflate(json.dumps(dict(trailer, lines=self.lines)).encode())))
                os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = None

    def abandon(self) -> None:
        """Close without a trailer (after a write error): what was written stays readable."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write(self, data: bytes) -> None:
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
