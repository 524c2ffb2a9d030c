"""The whole screen, the same for live and replay: header, the tuning panel once a tunable changed,
then one panel per metric (and before any change a line with the watched tunables' values).
It fits the terminal: on a short one the tables give up rows before any panel is cropped away."""
from __future__ import annotations

from dataclasses import dataclass, replace

from rich.console import Console, ConsoleOptions
from rich.segment import Segment

from zfsobs.model import Model
from zfsobs.views.box import Box, as_segments
from zfsobs.views.header import render_header
from zfsobs.views.status import Status
from zfsobs.views.tuning_panel import height as tuning_height
from zfsobs.views.tuning_panel import render_tuning
from zfsobs.views.txg_panel import render_txg
from zfsobs.views.vc_panel import render_vc
from zfsobs.views.vq_panel import render_vq
from zfsobs.views.zil_panel import render_zil


@dataclass(frozen=True)
class Rows:
    """Table rows per panel: txg and ZIL per pool (0: summary lines only), vdev queue vdevs, and
    vdev_cache vdevs (0: its state on one line)."""
    txg: int
    zil: int
    vq: int
    vc: int


class Fit:
    """What fitted the last frame: the next one starts from it, so a screen that had to step down
    renders once, not twice, each refresh (a render is most of the live view's CPU)."""
    def __init__(self):
        self.key: tuple | None = None
        self.rows: Rows | None = None


def render_screen(model: Model, status: Status, height: int, now_ns: int | None = None,
                  fit: Fit | None = None) -> "Screen":
    return Screen(model, status, height, now_ns, fit)


class Screen:
    def __init__(self, model: Model, status: Status, height: int, now_ns: int | None, fit: Fit | None = None):
        self.model, self.status, self.height, self.now, self.fit = model, status, height, now_ns, fit
        self.changed = model.tuning.latest is not None
        # the tuning panel (a change's before/after) comes out of the three metric panels' shares,
        # rounded up per panel. Before a change it is one dim line, placed last: the first thing a
        # short terminal crops
        self.tune_rows = 6 if height >= 50 else 3 if height >= 38 else 1
        reserve = tuning_height(model, self.tune_rows) if self.changed or height >= 38 else 0
        body = max(12, height - 8 - 3 * -(-reserve // 3))
        vc = 3 if model.vc.state()[0] == "active" else 1
        vq = max(4, body // 3 - 3)
        self.rows = Rows(txg=max(3, body // 3 // max(1, len(model.txg.pools)) - 4),
                         zil=max(3, body // 3 // max(1, len(model.zil.pools)) - 5),
                         vq=max(4, vq - (vc if vc > 1 else 0)), vc=vc)

    def _blocks(self, rows: Rows) -> list:
        m, now = self.model, self.now
        tuning = render_tuning(m, self.status.meta, self.tune_rows, now)
        tuning = [tuning] if tuning is not None else []
        marks = [c.ts for c in m.tuning.changes]
        return [Box(render_header(m, self.status, now)), *(tuning if self.changed else []),
                render_txg(m.txg, rows.txg, marks), render_zil(m, rows.zil, now),
                render_vq(m, rows.vq, now), render_vc(m, self.status.meta, rows.vc, now),
                *([] if self.changed else tuning)]

    def __rich_console__(self, console: Console, options: ConsoleOptions):
        yield from as_segments(self.lines(console, options))

    def lines(self, console: Console, options: ConsoleOptions) -> list[list[Segment]]:
        """The screen's lines, at most its height: each panel laid out once (views/paint.py writes
        them as they are)."""
        opts = options.update(height=None)
        key = (self.height, options.max_width, self.rows)
        fit = self.fit if self.fit is not None and self.fit.key == key else None
        rows, lines = (fit.rows if fit and fit.rows else self.rows), []
        # a tall terminal renders once; a short one steps down the ladder until the screen fits
        for cut in (None, _fewer_vdevs, _summaries, _fewer_vdevs):
            if cut is not None:
                smaller = cut(rows, len(lines) - self.height)
                if smaller == rows:
                    continue
                rows = smaller
            lines = [line for block in self._blocks(rows) for line in (
                block.lines(console, opts) if isinstance(block, Box) else console.render_lines(block, opts, pad=False))]
            if len(lines) <= self.height:
                break
        if self.fit is not None:
            # keep a cut that fitted snugly; with room to spare, the next frame tries the full rows again
            snug = rows != self.rows and len(lines) >= self.height - 2      # or the most it could cut
            self.fit.key, self.fit.rows = key, rows if snug else None
        return lines[:max(1, self.height)]


def _fewer_vdevs(rows: Rows, over: int) -> Rows:
    """The vdev queue gives up its quietest vdevs (to 3 while the tables are shown, then to 1)."""
    return replace(rows, vq=max(3 if rows.txg else 1, rows.vq - over))


def _summaries(rows: Rows, over: int) -> Rows:
    """The txg and ZIL tables go (their summary lines and sparklines stay); vdev_cache keeps one line."""
    return replace(rows, txg=0, zil=0, vc=0)
