"""The one event schema (docs/events.md): parse, validate, count what does not fit.

A line is `zfsobs <version> <kind> <ts_ns> key=value ...`; bpftrace's and D's printf can both emit it.
Values are integers or bare words (no spaces); the integer -1 means "unavailable".
"""
from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter, methodcaller

MAGIC = "zfsobs"
SCHEMA_VERSION = 1

# Required fields per known kind; other kinds and extra fields pass through untouched.
REQUIRED: dict[str, tuple[str, ...]] = {
    "hello": ("probe",),
    "bye": ("probe",),
    "txg": ("pool", "txg", "start", "sync_ns"),
    "txg_thr": ("pool", "txg", "delays", "delay_ns"),
    "lost": ("count",),
    "zil": ("pool", "txg", "cpu"),
    "zil_itx": ("pool", "txg", "cpu"),
    "zil_lat": ("pool", "txg", "cpu", "seg"),
    "vq": ("pool", "vd", "class"),
    "vq_lat": ("vd", "class", "kind"),
    "vq_vdev": ("pool", "vd"),
    "vc": ("pool", "vd", "size"),
    "tunable": ("name", "new"),
}


# Fields whose values are words; in a known kind every other field is an integer (or -1), so the
# model may do arithmetic on it: a word where a number belongs makes the line malformed, not a
# crash later. Unknown kinds pass as they are.
WORD_FIELDS = frozenset({"pool", "path", "vd", "name", "src", "probe", "target", "na", "cause"})
# Every integer (ts included) lies strictly within +-INT_RANGE: a difference or a sum of two fits in
# an int64 and every one in a float, so nothing past the parser overflows. Past it: malformed.
INT_RANGE = 1 << 62
# ...but for identifiers, which no model does arithmetic on: a vdev's guid is any 64-bit number
WIDE_FIELDS = frozenset({"guid"})
WIDE = 1 << 64
# Ordered holds at most this many events waiting for their time order; past it they go on early
HOLD = 1 << 17


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    ts: int
    fields: dict = field(default_factory=dict)

    def get(self, name, default=None):
        value = self.fields.get(name, default)
        return default if value is None else value

    def line(self) -> str:
        """The event as a schema line again (for events made in Python, e.g. lost counts)."""
        return format_line(self.kind, self.ts, self.fields)

    def __reduce__(self):
        # replay's kept states and seek index hold thousands: a slotted dataclass's own pickling
        # asks dataclasses.fields() for each one (a third of building a day's seek index)
        return type(self), (self.kind, self.ts, self.fields)


def key_values(parts: list[str], strict: bool = False) -> dict[str, str]:
    """The key=value words of a split schema line (after `zfsobs 1 kind ts`), as text. A word without
    `=` is skipped, or with `strict` a ValueError (the line is not what its kind says)."""
    if strict:
        return dict(p.split("=", 1) for p in parts[4:])
    return dict(p.split("=", 1) for p in parts[4:] if "=" in p)


def format_line(kind: str, ts: int, fields: dict) -> str:
    parts = [MAGIC, str(SCHEMA_VERSION), kind, str(int(ts))]
    for key, value in fields.items():
        parts.append(f"{key}={-1 if value is None else value}")
    return " ".join(parts)


class EventLine(str):
    """A line zfsobs made itself (the vdev queue's, of its probe's dumps) with the event it says:
    the session feeds that event, not the line parsed back by another thread (docs/performance.md,
    "Live path"); a capture still gets the text."""
    event: Event


def event_line(kind: str, ts: int, fields: dict) -> str:
    """format_line's text, and the event Parser.parse would make of it: int fields as ints (-1:
    None), word fields as their text. A line the parser might judge otherwise (a value that is not
    a number, a word with a space, a required field missing) is left to it: a plain str."""
    line = format_line(kind, ts, fields)
    typed = {}
    try:
        for key, value in fields.items():
            if key in WORD_FIELDS:
                text = "-1" if value is None else str(value)
                if text.split() != [text]:
                    return line
                typed[key] = None if text == "-1" else text
            else:
                number = -1 if value is None else int(value)
                if not (-1 <= number < WIDE if key in WIDE_FIELDS else -INT_RANGE < number < INT_RANGE):
                    return line
                typed[key] = None if number == -1 else number
    except ValueError:
        return line
    if not 0 <= ts < INT_RANGE or any(typed.get(name) is None for name in REQUIRED[kind]):
        return line
    made = EventLine(line)
    made.event = Event(kind, int(ts), typed)
    return made


def parse_all(lines, parser: "Parser") -> list[Event]:
    """Every event of a capture, in time order (several bpftrace processes interleave)."""
    return list(iter_sorted(lines, parser))


_TS = itemgetter(3)


def low_ts(lines: list[str]) -> float:
    """A lower bound of the ts of every line in `lines` that parses (same split as Parser.parse)."""
    try:
        return min(map(int, map(_TS, map(methodcaller("split", None, 4), lines))), default=float("inf"))
    except (ValueError, IndexError):
        low = float("inf")
        for line in lines:
            try:
                low = min(low, int(line.split(None, 4)[3]))
            except (ValueError, IndexError):
                pass         # not an event: Parser.parse drops it too
        return low


class Ordered:
    """Events of chunks of lines in time order (ts, then file order) without holding them all: a
    chunk's events go out once no later chunk can hold an earlier ts (`later`, from bounds()).
    Its place can be kept and gone back to (replay's step back). Subclasses say what chunk k's
    lines are."""

    def __init__(self, later: list, parser: "Parser"):
        self.parser, self.later = parser, later
        self.k, self.pending, self.ready = 0, [], deque()
        self.early = 0          # events passed on before their order was certain (HOLD, _WORK)
        self._seen = self._work = 0

    @staticmethod
    def bounds(lows: list) -> list:
        """later[k]: the lowest ts from chunk k on, given each chunk's lowest (lows[k])."""
        later = [float("inf")] * (len(lows) + 1)
        for k in reversed(range(len(lows))):
            later[k] = min(later[k + 1], lows[k])
        return later

    def chunk(self, k: int) -> list[str]:
        raise NotImplementedError

    def events_of(self, k: int):
        """Chunk k's events, unordered."""
        return filter(None, map(self.parser.parse, self.chunk(k)))

    def done(self) -> None:
        """Called once the last chunk is read."""

    def __iter__(self) -> "Ordered":
        return self

    def __next__(self) -> Event:
        while not self.ready:
            if self.k >= len(self.later) - 1:
                self.done()
                raise StopIteration
            pending = self.pending
            held = len(pending)
            pending.extend(self.events_of(self.k))
            self._seen += len(pending) - held
            self._work += len(pending)
            pending.sort(key=_EV_TS)          # stable: earlier lines first among equal ts
            # a later chunk's event of the same ts comes later in the file: ts <= its lowest goes
            cut = bisect_right(pending, self.later[self.k + 1], key=_EV_TS)
            if len(pending) - cut > HOLD or self._work > _WORK * self._seen + (1 << 20):
                # held past the bound (a later record claims an earlier time than it brings), or
                # sorted over and over: all go on, in time order so far, counted
                self.early += len(pending) - cut
                cut = len(pending)
            self.ready.extend(pending[:cut])
            del pending[:cut]
            self.k += 1
        return self.ready.popleft()

    def place(self) -> tuple:
        """Where the stream is (the events handed out so far are the model's business)."""
        return self.k, list(self.pending), list(self.ready)

    def go(self, place: tuple) -> None:
        self.k, pending, ready = place
        self.pending, self.ready = list(pending), deque(ready)


class _Slices(Ordered):
    def __init__(self, lines: list[str], parser: "Parser", size: int):
        self.lines, self.size = lines, size
        super().__init__(self.bounds([low_ts(lines[i:i + size]) for i in range(0, len(lines), size)]), parser)

    def chunk(self, k: int) -> list[str]:
        return self.lines[k * self.size:(k + 1) * self.size]


def iter_sorted(lines: list[str], parser: "Parser", chunk: int = 1 << 14) -> Ordered:
    """parse_all's events one by one, in exactly its order, without holding them all."""
    return _Slices(lines, parser, chunk)


_EV_TS = attrgetter("ts")
_WORK = 64       # Ordered's sorting: at most this many events sorted per event read (plus a constant)


def is_event_line(line: str) -> bool:
    """Meant as an event (possibly malformed), as opposed to other output of the tracer."""
    line = line.strip()
    return line == MAGIC or line.startswith(MAGIC + " ")


def _value(text: str, key: str):
    """An integer (None for -1; one past its range, ValueError) or the text (a word field's too)."""
    try:
        number = int(text)
    except ValueError:
        return text
    if key in WORD_FIELDS:
        pass
    elif key in WIDE_FIELDS:
        if not -1 <= number < WIDE:
            raise ValueError(text)
    elif not -INT_RANGE < number < INT_RANGE:
        raise ValueError(text)
    return None if number == -1 else number


@dataclass
class Parser:
    """Turns lines into events. Never raises: bad lines are counted, not fatal."""

    events: int = 0
    malformed: int = 0
    ignored: int = 0          # lines that are not events at all (bpftrace banners, blank lines)
    unknown_kinds: int = 0
    newer: int = 0            # events of a schema version newer than ours (parsed best-effort)
    last_malformed: str = ""

    def parse(self, line: str) -> Event | None:
        line = line.strip()
        if not is_event_line(line):
            if line:
                self.ignored += 1
            return None
        parts = line.split()
        if len(parts) > 3 and parts[1] == "1" and parts[2] in REQUIRED:
            ev = _fast(parts)
            if ev is not None:
                self.events += 1
                return ev
        return self._parse(line, parts)

    def _parse(self, line: str, parts: list[str]) -> Event | None:
        """The rules of docs/events.md, one token at a time: every line _fast does not take."""
        try:
            version = int(parts[1])
            kind = parts[2]
            ts = int(parts[3])
            if version < 1 or not 0 <= ts < INT_RANGE or not kind.isidentifier():
                raise ValueError
            fields = {}
            for token in parts[4:]:
                key, sep, text = token.partition("=")
                if not sep or not key:
                    raise ValueError
                value = _value(text, key)
                if key in WORD_FIELDS:
                    value = None if value is None else text
                elif isinstance(value, str) and kind in REQUIRED:
                    raise ValueError
                fields[key] = value
            missing = [name for name in REQUIRED.get(kind, ()) if fields.get(name) is None]
            if missing:
                raise ValueError
        except (ValueError, IndexError):
            self.malformed += 1
            self.last_malformed = line[:200]
            return None
        if version > SCHEMA_VERSION:
            self.newer += 1
        if kind not in REQUIRED:
            self.unknown_kinds += 1
        self.events += 1
        return Event(kind, ts, fields)


_split_eq = methodcaller("split", "=", 1)
_plans: dict[tuple, tuple | None] = {}     # (kind, keys) -> (int keys, word keys, wide ones), or None: not fast
_MAX_PLANS = 4096                          # hostile input must not grow it without end


def _plan(kind: str, keys: tuple) -> tuple | None:
    if "" in keys or not all(name in keys for name in REQUIRED[kind]):
        return None
    narrow = tuple(k for k in keys if k not in WORD_FIELDS and k not in WIDE_FIELDS)
    wide = tuple(k for k in keys if k in WIDE_FIELDS)
    return narrow + wide, tuple(k for k in keys if k in WORD_FIELDS), len(wide)


def _fast(parts: list[str]) -> Event | None:
    """A schema-1 line of a known kind in the common shape (every token key=value, no key twice,
    every int field an int other than -1, no word field starting with "-", every required field
    there), parsed with C-level loops; None for anything else, which Parser._parse then judges the slow way."""
    try:
        ts = int(parts[3])
        fields = dict(map(_split_eq, parts[4:]))
    except ValueError:
        return None
    if len(fields) != len(parts) - 4:
        return None          # a key given twice: the first value may make the line malformed
    kind = parts[2]
    key = (kind, tuple(fields))
    plan = _plans.get(key, False)
    if plan is False:
        plan = _plan(kind, key[1])
        if len(_plans) < _MAX_PLANS:
            _plans[key] = plan
    if plan is None or not 0 <= ts < INT_RANGE:
        return None
    ints, words, nwide = plan
    try:
        values = list(map(int, map(fields.__getitem__, ints)))
    except ValueError:
        return None
    narrow = values[:len(values) - nwide] if nwide else values
    if -1 in values or narrow and not -INT_RANGE < min(narrow) <= max(narrow) < INT_RANGE:
        return None
    if nwide and not 0 <= min(values[-nwide:]) <= max(values[-nwide:]) < WIDE:
        return None
    for name in words:
        if fields[name][:1] == "-":
            return None
    fields.update(zip(ints, values))
    return Event(kind, ts, fields)
