"""A summary line made of phrases ("p99 86.16", "max 112.39"): laid out at the panel's width, it wraps
only between phrases, never inside one, and keeps at most `max_lines` lines; the phrases that do not fit
then are left out, the last ones first (they are given most telling first). A phrase wider than a whole
line wraps between its words."""
from __future__ import annotations

from rich.text import Text

from zfsobs.views.box import as_segments, fitted


class Phrases:
    def __init__(self, head: Text | None, phrases: list, sep: str = "  ", max_lines: int = 2):
        self.head = head
        self.phrases = [p if isinstance(p, Text) else Text(p) for p in phrases if p]
        self.sep, self.max_lines = sep, max_lines

    def __rich_console__(self, console, options):
        yield from as_segments(self.lines(console, options.max_width))

    def texts(self, width: int) -> list[Text]:
        width = max(1, width)
        parts = ([self.head] if self.head is not None else []) + self.phrases
        out: list[Text] = []
        for part in parts:
            for piece in _words(part, width):
                if out and out[-1].cell_len + len(self.sep) + piece.cell_len <= width:
                    out[-1].append(self.sep)
                    out[-1].append_text(piece)
                elif len(out) < self.max_lines:
                    out.append(piece.copy())
                else:
                    return out
        return out

    def lines(self, console, width: int) -> list:
        return [fitted(console, t, width) for t in self.texts(width)]


def _words(part: Text, width: int) -> list[Text]:
    """The phrase itself, or where it is wider than a line, its words wrapped to the width."""
    if part.cell_len <= width:
        return [part]
    out, line_start = [], 0
    plain = part.plain
    while len(plain) - line_start > width:
        cut = plain.rfind(" ", line_start, line_start + width + 1)
        if cut <= line_start:
            cut = line_start + width          # one word wider than the line: it is cut at the width
            out.append(part[line_start:cut])
            line_start = cut
            continue
        out.append(part[line_start:cut])
        line_start = cut + 1
    out.append(part[line_start:])
    return out
