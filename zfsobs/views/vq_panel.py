"""The vdev queue panel: a leaf vdev x I/O class grid over the last second. Each cell shows the
time-weighted mean of active I/Os as a bar against the class's max_active limit, the highest
active count seen (red when it reached the limit: the class is saturated), and the mean/max of
pending I/Os waiting in the queue behind it."""
from __future__ import annotations

import os

from rich.segment import Segment
from rich.text import Text

from zfsobs import safe
from zfsobs.model import Model
from zfsobs.model.vdev_queue import SHORT
from zfsobs.views.box import Box, as_segments, fitted

WINDOW_S = 1.0
BAR = 6
EIGHTHS = " ▏▎▍▌▋▊▉█"


def bar(value: float, limit: int | None, width: int = BAR) -> str:
    """value of limit as a bar of `width` cells, in eighths."""
    if not limit or limit <= 0:
        return " " * width
    eighths = max(0, min(width * 8, round(value / limit * width * 8)))
    return ("█" * (eighths // 8) + (EIGHTHS[eighths % 8] if eighths % 8 else "")).ljust(width)


def render_vq(model: Model, rows: int, now_ns: int | None) -> Box:
    window = model.vq.window(WINDOW_S, now_ns)
    if not window:
        note = "no queued I/O in the last second" if model.vq.series else "no queued I/O seen yet"
        if "vdev_queue" not in model.probes:
            note = "vdev queue probe not running (see the status line)"
        return Box(Text(note, style="dim"), title="vdev queue", title_align="left")
    classes = sorted({s.cls for _, s, _ in window})
    limits = {}
    for _, s, _ in window:
        limits.setdefault(s.cls, s.max_active)
    grid: dict[tuple, dict] = {}
    names: dict[tuple, str] = {}
    for vdev, s, w in window:
        key = (vdev.pool, vdev.path, vdev.pid)
        grid.setdefault(key, {})[s.cls] = (w, s.max_active)
        names[key] = vdev
    heads = ["vdev (act mean▕bar▏ max/limit, pend mean/max)"] + [
        f"{SHORT[c]} ≤{limits[c] if limits[c] is not None else '?'}" for c in classes]
    keys = sorted(grid, key=lambda k: (k[0], -_busy(grid[k]), k[1]))
    pools = {k[0] for k in keys}
    lines = []
    for key in keys[:rows]:
        pool, path, pid = key
        label = os.path.basename(path) + (f" {pool}" if len(pools) > 1 else "") + (f" [{pid}]" if pid else "")
        lines.append([Text(safe.text(label)), *(_cell(grid[key].get(c)) for c in classes)])
    table = Grid(heads, lines, [2] + [3] * len(classes))
    hidden = len(keys) - rows
    title = f"vdev queue {safe.text('/'.join(sorted(pools)))}, last {WINDOW_S:g} s: {len(keys)} vdevs" + (f" ({hidden} quieter not shown)" if hidden > 0 else "")
    return Box(table, title=title, title_align="left")


class Grid:
    """Rows of styled cells in columns sized by ratio, as lines of one Text (a rich Table renders
    every cell on its own: most of the panel's time). A cell is a Text, or a tuple of its forms,
    fullest first: the first that fits its column is shown (a narrow one loses the bar, not digits)."""

    def __init__(self, heads: list[str], rows: list[list[Text]], ratios: list[int]):
        self.heads, self.rows, self.ratios = heads, rows, ratios

    def __rich_console__(self, console, options):
        yield from as_segments(self.lines(console, options.max_width))

    def lines(self, console, width: int) -> list[list[Segment]]:
        """The grid's lines, each the width: laid out here, not by rich's wrapping (views/box.py)."""
        room, parts = width - 2 * len(self.ratios), sum(self.ratios)
        widths = [room * r // parts for r in self.ratios]
        out = []
        heads = [Text(h, style="bold") for h in self.heads]
        if heads and heads[0].cell_len > widths[0]:     # the legend is README's then
            heads[0] = Text(self.heads[0].split(" (")[0], style="bold")
        for cells in [heads] + self.rows:
            text = Text()
            for i, (cell, cell_width) in enumerate(zip(cells, widths)):
                cell = (cell[0] if isinstance(cell, tuple) else cell).copy()
                if i == 0 and cells is not heads and cell.cell_len > cell_width > 1:
                    # a vdev's name keeps its end (the vdev and the pid): the pool's prefix goes
                    cell = Text("…") + cell[len(cell) - cell_width + 1:]
                if isinstance(cells[i], tuple):     # a cell's forms, fullest first: the first that fits
                    cell = next((c for c in cells[i] if c.cell_len <= cell_width), cells[i][-1]).copy()
                cell.truncate(cell_width, overflow="ellipsis", pad=True)
                text.append(" ")
                text.append_text(cell)
                text.append(" ")
            out.append(fitted(console, text, width))
        return out


def _busy(cells: dict) -> float:
    return sum(w["act_mean"] + w["pend_mean"] for w, _ in cells.values())


def _cell(item) -> tuple[Text, ...]:
    """The cell's forms, fullest first: with the bar, without it, then without the pending I/Os."""
    if item is None:
        return (Text(""),)
    w, limit = item
    w = {k: max(0, v) for k, v in w.items()}      # a hair below 0 is rounding, not a real depth
    full = limit is not None and w["act_max"] >= limit > 0
    mean = (f"{w['act_mean']:4.1f}", "bold")
    top = ((f"{w['act_max']}", "bold red" if full else ""), (f"/{limit if limit is not None else '?'}", "dim"))
    pend = (f"  p {w['pend_mean']:.1f}/{w['pend_max']}", "yellow" if w["pend_max"] else "dim")
    return (Text.assemble(mean, ("▕", "dim"), (bar(w["act_mean"], limit), "green"), ("▏", "dim"), *top, pend),
            Text.assemble(mean, " ", *top, pend), Text.assemble(mean, " ", *top))
