"""Reading captures: one pass over the records keeps their places, not their lines, so a report on
a week of recording holds what its model holds, not the file. Damage yields warnings and a readable
prefix; never an exception other than ZfsobsError (missing, foreign or too-new files)."""
from __future__ import annotations

import os
import re
import stat
import zlib
from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from dataclasses import dataclass, field

from zfsobs.capture import digest
from zfsobs.capture.format import (FILE_MAGIC, FORMAT_NAME, FORMAT_VERSION, HEADER_TYPES, LINE_KINDS, LINES_HEAD,
                                   MAX_LINES, MAX_PAYLOAD, MAX_RECORD, NO_TS, RECORD_MAGIC, _FILE_HEAD, _REC_HEAD, as_json, inflate,
                                   payload_lines)
from zfsobs.errors import ZfsobsError
from zfsobs.events import HOLD, INT_RANGE, Event, Ordered, Parser

CHUNK = 1 << 20
# resync's work: the bytes of the false records it checks (each a CRC over the length its head
# claims) are at most this many times the file's size, plus MAX_RECORD; past that it stops
RESYNC_FACTOR = 8


@dataclass
class Capture:
    path: str
    meta: dict
    trailer: dict | None
    warnings: list[str] = field(default_factory=list)
    version: int = FORMAT_VERSION
    # line records in file order: kind (E/V), body offset and length, sequence number, lowest and
    # highest ts (format 1: unknown, 0)
    kinds: bytearray = field(default_factory=bytearray)
    offsets: array = field(default_factory=lambda: array("q"))
    lengths: array = field(default_factory=lambda: array("q"))
    seqs: array = field(default_factory=lambda: array("q"))
    lows: array = field(default_factory=lambda: array("q"))
    highs: array = field(default_factory=lambda: array("q"))
    digests: list = field(default_factory=list)      # (offset, length, head) of intact G records
    _lines: list[str] | None = None
    _plans: dict = field(default_factory=dict)     # (digests, before) -> (chunks, bounds): see _plan
    _held: list | None = None                      # per digest, the records it covers: see _covered
    _highs: list | None = None                     # per digest, its records' highest ts
    _cover: array | None = None                    # per record, the digest covering it: see _covers
    _order: list | None = None                     # records and digests in file order: see _file_order
    _damaged: int = 0
    _file: object = None

    @property
    def lines(self) -> list[str]:
        """Every event line in file order (what replay and the time-binned views read)."""
        if self._lines is None:
            self._lines = [line for i in range(len(self.kinds)) for line in self._record_lines(i)]
            self._note_damage()
        return self._lines

    def events(self, parser: Parser, digests: bool = True, before: int | None = None) -> "EventStream":
        """Every event in time order (ts, then file order), as parse_all gives it. With `digests`,
        the V records an intact digest covers are skipped and its picked lines are fed instead:
        a whole-capture report's figures are the same (zfsobs/capture/digest.py). With `before`
        (a ts) too, only the digests whose records all end before it: every line from there on is
        read (replay's far seek, zfsobs/views/replay.py)."""
        return EventStream(self, parser, digests, before)

    def last_ts(self) -> int | None:
        """The ts of the last event (format 1: found by reading every event)."""
        if self.version >= 2:
            return max((h for h in self.highs if h != -NO_TS), default=None)
        return max((ev.ts for ev in self.events(Parser(), digests=False)), default=None)

    def _plan(self, digests: bool, before: int | None = None) -> tuple[list, list]:
        """_chunks and their bounds, worked out once: replay opens a stream at every step back, and
        a day of records takes a quarter of a second to plan."""
        key = (digests, before)
        if key not in self._plans:
            chunks = self._chunks(digests, before)
            self._plans[key] = chunks, Ordered.bounds([low for low, _ in chunks])
            while len(self._plans) > 8:         # each go-to plans for its own cut
                del self._plans[next(iter(self._plans))]
        return self._plans[key]

    def _chunks(self, digests: bool, before: int | None = None) -> list[tuple[int, int]]:
        """(lowest ts, record index, or -1 - digest index) of what a reader reads, in file order."""
        used = bytes(before is None or high < before for high in self._digest_highs()) if digests else b""
        if not any(used):
            return [(self.lows[i], i) for i in range(len(self.kinds))]
        # a record is read unless a used digest covers it (E records: never covered)
        cover, lows, e = self._covers(), self.lows, ord("E")
        low = [d[2]["low"] for d in self.digests]
        return [(lows[c], c) if c >= 0 else (low[-1 - c], c) for c in self._file_order()
                if (used[-1 - c] if c < 0 else self.kinds[c] == e or cover[c] < 0 or not used[cover[c]])]

    def _file_order(self) -> list[int]:
        """Every record (its index) and digest (-1 - its index) in file order, worked out once."""
        if self._order is None:
            at = [(self.offsets[i], i) for i in range(len(self.kinds))] + \
                 [(d[0], -1 - j) for j, d in enumerate(self.digests)]
            self._order = [c for _, c in sorted(at)]
        return self._order

    def _covers(self) -> array:
        """Per record, of the digests whose sequence range holds it, the one with the lowest high
        ts (used whenever any of them is), or -1: worked out once, so a cut's plan is one pass."""
        if self._cover is None:
            highs, held = self._digest_highs(), self._covered()
            self._cover = array("q", [-1]) * len(self.seqs)
            for j in sorted(range(len(self.digests)), key=highs.__getitem__, reverse=True):
                for i in held[j]:
                    self._cover[i] = j         # the lowest high, written last, wins
        return self._cover

    def _covered(self) -> list[list[int]]:
        """Per digest, the records its sequence range holds."""
        if self._held is None:
            order = sorted(range(len(self.seqs)), key=self.seqs.__getitem__)
            seqs = [self.seqs[i] for i in order]
            self._held = [order[bisect_left(seqs, h["seqs"][0]):bisect_right(seqs, h["seqs"][1])]
                          for _, _, h in self.digests]
        return self._held

    def _digest_highs(self) -> list[int]:
        """Per digest, the highest ts of the V records it covers (format 2 heads give each record's)."""
        if self._highs is None:
            v = ord("V")
            self._highs = [max((self.highs[i] for i in held if self.kinds[i] == v), default=-NO_TS)
                           for held in self._covered()]
        return self._highs

    def _record_lines(self, i: int) -> list[str]:
        body = self._body(self.offsets[i], self.lengths[i])
        lines = None if body is None else payload_lines(body, self.version >= 3 and self.kinds[i] == ord("V"))
        if lines is None:
            self._damaged += 1
            return []
        return lines

    def _body(self, offset: int, length: int) -> bytes | None:
        if self._file is None:
            self._file = open_regular(self.path)     # closed with the Capture (CPython: when unreferenced)
        self._file.seek(offset)
        body = self._file.read(length)
        return inflate(body) if len(body) == length else None

    def _note_damage(self) -> None:
        """Records whose CRC held but whose payload does not inflate: found only when read."""
        if self._damaged:
            self.warnings.append(f"{self._damaged} record(s) that do not inflate or unpack, or hold more than "
                                 f"{MAX_PAYLOAD >> 20} MiB or {MAX_LINES} lines, skipped")
            self._damaged = 0


class EventStream(Ordered):
    """A capture's events in time order, read a record at a time, ordered by the lowest ts in the
    records' heads. Format 1 has no such bounds (0): its events go out at the end, all sorted."""

    def __init__(self, cap: Capture, parser: Parser, digests: bool, before: int | None = None):
        self.cap = cap
        self.chunks, later = cap._plan(digests, before)
        self.stood_for = 0          # the lines the digests read so far stand for, not given as events
        self.peek = False           # counter lines as Peeked events (replay's far seek: zfsobs/views/far_seek.py)
        super().__init__(later, parser)

    def events_of(self, k: int):
        i = self.chunks[k][1]
        if self.peek and (i < 0 or self.cap.kinds[i] == ord("V")):     # a digest's or a V record's lines
            return list(filter(None, map(self._peek, self.chunk(k))))
        return super().events_of(k)

    def _peek(self, line: str) -> Event | None:
        try:
            return _peek(line)
        except (ValueError, IndexError):    # damage: e.g. format 3's packed lines in a file whose version byte says 2
            return self.parser.parse(line)

    def unpeek(self, ev: Event | None) -> Event | None:
        """A Peeked event parsed in full (the others as they are)."""
        return self.parser.parse(ev.raw) if type(ev) is Peeked else ev

    def stop_peeking(self) -> None:
        """From here on every event is parsed in full, the ones read already and not given too."""
        self.peek = False
        self.pending = [e for e in map(self.unpeek, self.pending) if e is not None]
        self.ready = deque(e for e in map(self.unpeek, self.ready) if e is not None)

    def chunk(self, k: int) -> list[str]:
        i = self.chunks[k][1]
        if i >= 0:
            return self.cap._record_lines(i)
        off, length, head = self.cap.digests[-1 - i]
        picked = digest.read(self.cap._body(off, length))
        self.parser.events += head["lines"] - head["picked"]    # the lines the digest stands for
        self.stood_for += head["lines"] - head["picked"]
        return picked[1] if picked else []

    def done(self) -> None:
        self.cap._note_damage()
        if self.early:
            self.cap.warnings.append(
                f"{self.early} event(s) passed on before their time order was certain (more than {HOLD} held "
                "at once: later records claim earlier times); they may be out of order")
            self.early = 0


@dataclass(frozen=True, slots=True)
class Peeked(Event):
    """A counter line (a digest's or a V record's) read no further than its time and the fields that
    name its series: V records hold only lines that parsed when they were written (digestible()
    takes only events), so it parses again; a far seek parses only the ones it keeps (most of its
    time was parsing the day's picked lines)."""
    raw: str = ""

    def __reduce__(self):
        return Peeked, (self.kind, self.ts, self.fields, self.raw)


_SERIES = re.compile(r" (pid|vd|class|kind|final)=(\S+)")


def _peek(line: str) -> Peeked:
    parts = line.split(None, 4)
    fields = {k: v if k == "vd" else (None if v == "-1" else int(v)) for k, v in _SERIES.findall(line)}
    ts = int(parts[3])
    if not 0 <= ts < INT_RANGE or any(type(v) is int and not -INT_RANGE < v < INT_RANGE for v in fields.values()):
        raise ValueError(line)       # the parser counts it malformed
    return Peeked(parts[2], ts, fields, line)


def open_regular(path: str):
    """The file at path (a symlink to one is followed) opened for reading if it is a regular file:
    a FIFO, a device or a directory is refused at once (O_NONBLOCK: opening a FIFO does not wait)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ZfsobsError(f"{path}: no such file") from None
    except OSError as exc:
        raise ZfsobsError(f"{path}: cannot read: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else \
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "special"
        raise ZfsobsError(f"{path}: is {what}, not a capture (a regular file)")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_capture(path: str) -> Capture:
    """Walk a capture's records once: its header, trailer and warnings, and where its lines are."""
    f = open_regular(path)
    with f:
        try:
            return _walk(path, _Buffer(f))
        except IsADirectoryError:
            raise ZfsobsError(f"{path}: is a directory, not a capture") from None
        except OSError as exc:
            raise ZfsobsError(f"{path}: cannot read: {exc.strerror}") from None


class _Buffer:
    """The file as a window that slides forward: at most a record (17 MiB, MAX_RECORD) and a read held at a time."""

    def __init__(self, f):
        self.f, self.base, self.data, self.eof = f, 0, bytearray(), False

    def have(self, pos: int, n: int) -> bool:
        """Whether bytes [pos, pos + n) exist; they are then in self.data at pos - self.base."""
        if pos - self.base + n <= len(self.data):
            return True
        del self.data[:pos - self.base]
        self.base = pos
        while len(self.data) < n and not self.eof:
            chunk = self.f.read(max(CHUNK, n - len(self.data)))
            self.eof = not chunk
            self.data += chunk
        return len(self.data) >= n

    def find(self, pos: int) -> int:
        """The next RECORD_MAGIC at or after pos, or -1."""
        while True:
            self.have(pos, 0)
            at = self.data.find(RECORD_MAGIC, pos - self.base)
            if at >= 0:
                return self.base + at
            if self.eof:
                return -1
            pos = self.base + max(0, len(self.data) - 1)
            self.have(pos, len(self.data) - (pos - self.base) + CHUNK)


def _walk(path: str, buf: _Buffer) -> Capture:
    if not buf.have(0, len(FILE_MAGIC)) or bytes(buf.data[:8]) != FILE_MAGIC or not buf.have(0, _FILE_HEAD.size):
        raise ZfsobsError(f"{path}: not a zfsobs capture (no {FORMAT_NAME} signature)")
    _, version = _FILE_HEAD.unpack_from(buf.data)
    if version > FORMAT_VERSION:
        raise ZfsobsError(f"{path}: capture format {version} is newer than this zfsobs reads "
                          f"({FORMAT_VERSION}); upgrade zfsobs")
    cap = Capture(path, {}, None, version=version)
    meta, pos, skipped, seq = None, _FILE_HEAD.size, 0, 0
    budget = [RESYNC_FACTOR * os.fstat(buf.f.fileno()).st_size + MAX_RECORD]   # see RESYNC_FACTOR
    while buf.have(pos, 1):
        rec = _record_at(buf, pos, budget)
        if rec is None and budget[0] < 0:
            buf.have(pos, 1)
            size = os.fstat(buf.f.fileno()).st_size - pos
            cap.warnings.append(f"last {size} bytes not searched for records: past damage, they hold more false "
                                f"record heads than resync checks ({RESYNC_FACTOR} times the file's size)")
            break
        if rec is None:
            nxt = buf.find(pos + 1)
            if nxt < 0:
                buf.have(pos, 1)
                size = buf.base + len(buf.data) - pos
                cap.warnings.append(f"last {size} bytes are an incomplete record (ignored)")
                break
            skipped += 1
            pos = nxt
            continue
        kind, start, body, pos = rec
        if kind in LINE_KINDS and (version >= 2 or kind == b"E"):
            if version >= 2:
                if len(body) < LINES_HEAD.size:
                    skipped += 1
                    continue
                rseq, low, high = LINES_HEAD.unpack_from(body)
                start += LINES_HEAD.size
            else:
                rseq, low, high = seq, 0, 0
            cap.kinds.append(kind[0])
            cap.offsets.append(start)
            cap.lengths.append(len(body) - (LINES_HEAD.size if version >= 2 else 0))
            cap.seqs.append(rseq)
            cap.lows.append(low)
            cap.highs.append(high)
            seq += 1
            continue
        payload = inflate(body)
        if payload is None:
            skipped += 1
        elif kind == b"H" and meta is None:
            meta = as_json(payload)
        elif kind == b"T":
            cap.trailer = as_json(payload)
        elif kind == b"G" and version >= 2:
            got = digest.read(payload)
            if got is not None and type(got[0].get("low")) is int:
                cap.digests.append((start, len(body), got[0]))
    if skipped:
        cap.warnings.append(f"{skipped} damaged record(s) skipped")
    if meta is None:
        raise ZfsobsError(f"{path}: capture header missing or damaged; nothing readable")
    for key, kind in HEADER_TYPES.items():
        if key in meta and (not isinstance(meta[key], kind) or isinstance(meta[key], bool)
                            or kind is int and not -INT_RANGE < meta[key] < INT_RANGE):
            cap.warnings.append(f"header field {key!r} is not a {kind.__name__} within +-2^62 (ignored)"
                                if kind is int else f"header field {key!r} is not a {kind.__name__} (ignored)")
            del meta[key]
    cap.meta = meta
    if cap.trailer is None:
        cap.warnings.append("no trailer: the recording did not end cleanly (data up to the last flush is here)")
    return cap


def _record_at(buf: _Buffer, pos: int, budget: list):
    """(kind, body offset, body, next pos) of an intact record at pos, or None; a false one's
    checked length is taken from budget[0]."""
    if not buf.have(pos, _REC_HEAD.size):
        return None
    magic, kind, length, crc = _REC_HEAD.unpack_from(buf.data, pos - buf.base)
    if magic != RECORD_MAGIC or length > MAX_RECORD or not buf.have(pos, _REC_HEAD.size + length):
        return None
    start = pos + _REC_HEAD.size
    with memoryview(buf.data) as view:
        body = view[start - buf.base:start - buf.base + length]
        intact = zlib.crc32(body, zlib.crc32(kind)) == crc
        body = bytes(body) if intact else None
    if not intact:
        budget[0] -= length
        return None
    return kind, start, body, start + length
