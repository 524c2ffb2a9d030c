"""Number formatting shared by every view (ms for times, MiB for dirty data), and sparklines."""
from __future__ import annotations

import time

from rich.segment import Segment
from rich.text import Text

from zfsobs.views.box import as_segments, fitted

SPARK = "▁▂▃▄▅▆▇█"


def ms(ns: float | None, digits: int = 2) -> str:
    return "-" if ns is None else f"{ns / 1e6:.{digits}f}"


def mib(nbytes: float | None) -> str:
    return "-" if nbytes is None else f"{nbytes / 1048576:.1f}"


def size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return ""


def sparkline(values: list[float], width: int) -> str:
    values = values[-width:]
    if not values:
        return ""
    top = max(values) or 1
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1) + 0.5))] for v in values)


def marked_sparkline(values: list[float], width: int, style: str, marks=()) -> Text:
    """sparkline() with the samples at `marks` (indices into values, e.g. the first sample after a
    tunable change) shown reversed, so a change stands out where it happened."""
    text = Text(sparkline(values, width), style=style)
    shift = max(0, len(values) - width)
    for i in marks:
        if 0 <= i - shift < len(text):
            text.stylize("reverse bold yellow", i - shift, i - shift + 1)
    return text


def wallclock(meta: dict, ts: int | None) -> str:
    """HH:MM:SS.mmm local time of a monotonic event timestamp, via the capture's clock anchor."""
    if ts is None or "start_wall_ns" not in meta or "start_mono_ns" not in meta:
        return "-"
    wall = meta["start_wall_ns"] + (ts - meta["start_mono_ns"])
    return time.strftime("%H:%M:%S", time.localtime(wall / 1e9)) + f".{int(wall / 1e6) % 1000:03d}"


class Tail:
    """`label` then `line`, on one line: on a narrow terminal `line` (a sparkline) loses its oldest
    samples, on the left, instead of wrapping."""

    def __init__(self, label: Text, line: Text):
        self.label, self.line = label, line

    def __rich_console__(self, console, options):
        room = max(0, options.max_width - len(self.label))
        yield Text.assemble(self.label, self.line[max(0, len(self.line) - room):], no_wrap=True)


class NumericTable:
    """A table laid out here as lines of one Text: rich's Table renders every cell on its own, most
    of a panel's render time. Cells are strings, or Texts where a cell has a style of its own; they
    are right-aligned but in the columns named in `left`. Each column is as wide as its longest
    cell; spare width is spread over the columns (like an expanding rich Table). On a terminal too
    narrow for every column, the columns in `drop` go first, in that order, instead of every column
    being cut short. `last`: (header, [Text per row]) for a free-width column at the end (the txg
    bars, the tuning sparklines); where its header does not fit, it loses its note in parentheses,
    then its last words."""

    def __init__(self, headers, rows: list[list], last=None, drop=(), left=()):
        self.headers, self.rows, self.last, self.drop = list(headers), rows, last, drop
        self.left = {i for i, name in enumerate(self.headers) if name in left}

    def __rich_console__(self, console, options):
        yield from as_segments(self.lines(console, options.max_width))

    def lines(self, console, width: int) -> list[list[Segment]]:
        """The table's lines, each the width: laid out here, not by rich's wrapping (views/box.py)."""
        plain = [[c.plain if isinstance(c, Text) else c for c in r] for r in self.rows]
        widths = [max([len(name)] + [len(r[i]) for r in plain]) for i, name in enumerate(self.headers)]
        keep = list(range(len(self.headers)))
        room = width - (12 if self.last else 0)
        for name in self.drop:
            if sum(widths[i] + 2 for i in keep) <= room:
                break
            keep = [i for i in keep if self.headers[i] != name]
        spare = max(0, room - sum(widths[i] + 2 for i in keep)) if not self.last else 0
        pads = [spare // len(keep) + (n < spare % len(keep)) for n in range(len(keep))] if keep else []

        def line(cells: list, texts: list, tail=None, style: str = "") -> Text:
            text = Text(style=style)
            run = []            # plain cells are joined, a styled one appended as its Text
            for i, pad in zip(keep, pads):
                gap = " " * (pad + widths[i] - len(texts[i]))
                cell = cells[i]
                if isinstance(cell, str):
                    run.append(" " + (cell + gap if i in self.left else gap + cell) + " ")
                    continue
                run.append(" " if i in self.left else " " + gap)
                text.append("".join(run))
                text.append_text(cell)
                run = [gap + " " if i in self.left else " "]
            text.append("".join(run))
            if tail is not None:
                text.append(" ")
                text.append_text(tail)
            return text

        out = [line(self.headers, self.headers, Text(self.last[0], style="bold") if self.last else None, "bold")]
        if self.last and out[0].cell_len > width:
            # the free column's header gives up its note in parentheses, then its last words: never cut in one
            words = self.last[0].split(" (")[0].split(" ")
            while len(words) > 1 and line(self.headers, self.headers, Text(" ".join(words))).cell_len > width:
                words.pop()
            out[0] = line(self.headers, self.headers, Text(" ".join(words), style="bold"), "bold")
        out += [line(r, texts, self.last[1][n] if self.last else None) for n, (r, texts) in enumerate(zip(self.rows, plain))]
        return [fitted(console, text, width) for text in out]
