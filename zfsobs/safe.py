"""The one rule for a string zfsobs did not write itself (a capture's header and lines, the traced
system's pool, vdev and tunable names, a path, an error quoting any of them) on its way out to a
terminal, a log or a spreadsheet (docs/reliability.md, "Output"):

- text(): every character that is not printable (str.isprintable(): the C0 controls, DEL, the C1
  controls, Unicode's format characters such as the bidi overrides, separators other than the space,
  surrogates, private-use and unassigned code points) is shown as its escape, `\\x1b`, `\\u202e`,
  `\\U000e0001`, as Python's repr() writes it. Nothing else changes, so text(text(s)) == text(s) and a
  layer that escapes again adds nothing. A backslash is left as it is: the rule guarantees that no
  control reaches the terminal, not that an escape shown was a control in the source.
- cell(): a CSV cell. A number is written as the number; a string is text()'s, with a `'` put
  before it when its first character (after spaces) is one a spreadsheet starts a formula with
  (OWASP's CSV injection list, and the full-width forms some spreadsheets also take).
"""
from __future__ import annotations

FORMULA_LEAD = frozenset("=+-@\t\r\n\0＝＋－＠")


def _escape(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def text(value: object) -> str:
    """`value` as a string that holds only printable characters (the space included)."""
    s = value if isinstance(value, str) else str(value)
    if s.isprintable():          # the common case: one C-level scan
        return s
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in s)


def lines(s: str) -> str:
    """text() of each line of `s`, the newlines between them kept: for a stream of whole messages."""
    return "\n".join(map(text, s.split("\n")))


def cell(value: object) -> object:
    """A CSV cell: a string as text that a spreadsheet reads as text; anything else as it is, for
    the csv module to write (a number as the number, a negative one too; None empty)."""
    if not isinstance(value, str):
        return value
    s = text(value)
    return "'" + s if s.lstrip(" ")[:1] in FORMULA_LEAD else s


class Stream:
    """A text stream whose writes pass lines(): what zfsobs writes to stderr (its messages quote
    paths, names and the tracer's own words) carries no control but the newline."""

    def __init__(self, raw):
        self.raw = raw

    def write(self, s: str) -> int:
        self.raw.write(lines(s))
        return len(s)

    def __getattr__(self, name: str):
        return getattr(self.raw, name)
