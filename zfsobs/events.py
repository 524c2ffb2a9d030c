"""The one event schema (docs/events.md): parse, validate, count what does not fit.

A line is `zfsobs <version> <kind> <ts_ns> key=value ...`; bpftrace's and D's printf can both emit it.
Values are integers or bare words (no spaces); the integer -1 means "unavailable".
"""
from __future__ import annotations

from dataclasses import dataclass, field

MAGIC = "zfsobs"
SCHEMA_VERSION = 1

# Required fields per known kind; other kinds and extra fields pass through untouched.
REQUIRED: dict[str, tuple[str, ...]] = {
    "hello": ("probe",),
    "bye": ("probe",),
    "txg": ("pool", "txg", "start", "sync_ns"),
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
WORD_FIELDS = frozenset({"pool", "path", "vd", "name", "src", "probe", "target"})


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


def format_line(kind: str, ts: int, fields: dict) -> str:
    parts = [MAGIC, str(SCHEMA_VERSION), kind, str(int(ts))]
    for key, value in fields.items():
        parts.append(f"{key}={-1 if value is None else value}")
    return " ".join(parts)


def parse_all(lines, parser: "Parser") -> list[Event]:
    """Every event of a capture, in time order (several bpftrace processes interleave)."""
    return sorted(filter(None, map(parser.parse, lines)), key=lambda ev: ev.ts)


def is_event_line(line: str) -> bool:
    """Meant as an event (possibly malformed), as opposed to other output of the tracer."""
    line = line.strip()
    return line == MAGIC or line.startswith(MAGIC + " ")


def _value(text: str):
    try:
        number = int(text)
    except ValueError:
        return text
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
        try:
            version = int(parts[1])
            kind = parts[2]
            ts = int(parts[3])
            if version < 1 or ts < 0 or not kind.isidentifier():
                raise ValueError
            fields = {}
            for token in parts[4:]:
                key, sep, text = token.partition("=")
                if not sep or not key:
                    raise ValueError
                value = _value(text)
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
