"""The whole screen, the same for live and replay: header, the tuning panel once a tunable changed,
then one panel per metric (and before any change a line with the watched tunables' values).
It fits the terminal: on a short one the less telling lines go first (the sparklines and the latency
histogram, then the summaries' second lines, then the header's border), then the tables' rows down to the
last txgs and the busiest vdevs; only a terminal too short for those loses the tables. No panel is cropped away."""
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
    vdev_cache vdevs (0: its state on one line); `spark` False: no txg sparkline or ZIL latency
    histogram; `lines`: the txg and ZIL summaries' most lines; `frame` False: the header without its border."""
    txg: int
    zil: int
    vq: int
    vc: int
    spark: bool = True
    lines: int = 2
    frame: bool = True


class Fit:
    """What fitted the last frame: the next one starts from it, so a screen that had to step down
    renders once, not twice, each refresh (a render is most of the live view's CPU)."""
    def __init__(self):
        self.key: tuple | None = None
        self.rows: Rows | None = None
        self.used = 0           # the screen's lines when the ladder stepped down to `rows`


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
        return [Box(render_header(m, self.status, now), frame=rows.frame), *(tuning if self.changed else []),
                render_txg(m.txg, rows.txg, marks, rows.lines, rows.spark, m.first_ts),
                render_zil(m, rows.zil, now, rows.lines, rows.spark),
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
        rows, lines, used = (fit.rows if fit and fit.rows else self.rows), [], 0
        pools = (max(1, len(self.model.txg.pools)), max(1, len(self.model.zil.pools)))
        # a tall terminal renders once; a short one steps down the ladder until the screen fits
        for cut in LADDER:
            if cut is not None:
                smaller = cut(rows, used - self.height, pools)
                if smaller == rows:
                    continue
                rows = smaller
            blocks = self._blocks(rows)
            lines = [line for block in blocks for line in (
                block.lines(console, opts) if isinstance(block, Box) else console.render_lines(block, opts, pad=False))]
            # the one-line tunables list, last before any change, has room while the vdev queue can
            # give it a row; past that (the sparklines gone) it is cropped, not made room for
            used = len(lines) - (1 if not rows.spark and not self.changed and not isinstance(blocks[-1], Box) else 0)
            if used <= self.height:
                break
        if self.fit is not None:
            self._remember(key, rows, used, fit is not None and rows == fit.rows)
        return lines[:max(1, self.height)]

    def _remember(self, key: tuple, rows: Rows, used: int, as_remembered: bool) -> None:
        """The cut the ladder stepped down to is the next frame's start (the least cut that fits:
        a step can free more lines than it had to). A remembered cut that fitted as it was is kept
        while the screen is within 2 lines of what it was; shorter, the next frame tries the full rows."""
        fit = self.fit
        if rows == self.rows or (as_remembered and used < fit.used - 2):
            fit.key, fit.rows = key, None
        elif not as_remembered:
            fit.key, fit.rows, fit.used = key, rows, used


def _fewer_vdevs(rows: Rows, over: int, pools: tuple[int, int]) -> Rows:
    """The vdev queue gives up its quietest vdevs (to 3 while the tables are shown, then to 1)."""
    return replace(rows, vq=max(3 if rows.txg else 1, rows.vq - over))


def _no_sparklines(rows: Rows, over: int, pools: tuple[int, int]) -> Rows:
    """The txg sparkline and the ZIL latency histogram go: the tables' rows say more."""
    return replace(rows, spark=False)


def _one_line(rows: Rows, over: int, pools: tuple[int, int]) -> Rows:
    """The summaries keep their first line (the most telling phrases), vdev_cache one line."""
    return replace(rows, lines=1, vc=0)


def _bare_header(rows: Rows, over: int, pools: tuple[int, int]) -> Rows:
    """The header's border goes: two lines that tell nothing."""
    return replace(rows, frame=False)


def _fewer_rows(rows: Rows, over: int, pools: tuple[int, int], least: int = 2) -> Rows:
    """The tables give up their oldest txgs and quietest vdevs, the longest first, down to `least`
    rows each: a row less per pool is a line less per pool (a guess: an empty panel saves none, and
    the next step measures again)."""
    txg, zil, vq = rows.txg, rows.zil, rows.vq
    while over > 0:
        longest = max((txg * pools[0], "txg"), (zil * pools[1], "zil"), (vq, "vq"))[1]
        if longest == "txg" and txg > least:
            txg, over = txg - 1, over - pools[0]
        elif longest == "zil" and zil > least:
            zil, over = zil - 1, over - pools[1]
        elif vq > least:
            vq, over = vq - 1, over - 1
        elif txg > least:
            txg, over = txg - 1, over - pools[0]
        elif zil > least:
            zil, over = zil - 1, over - pools[1]
        else:
            break
    return replace(rows, txg=txg, zil=zil, vq=vq)


def _one_row(rows: Rows, over: int, pools: tuple[int, int]) -> Rows:
    """The last txg, the ZIL's last txg and the busiest vdev: the tables' last stand."""
    return replace(rows, txg=min(rows.txg, 1), zil=min(rows.zil, 1), vq=min(rows.vq, 1))


def _summaries(rows: Rows, over: int, pools: tuple[int, int]) -> Rows:
    """The txg and ZIL tables go (their summary lines stay); vdev_cache keeps one line."""
    return replace(rows, txg=0, zil=0, vc=0)


# each step is taken only while the screen is still too tall; a step that changes nothing costs no render
LADDER = (None, _fewer_vdevs, _no_sparklines, _one_line, _bare_header, _fewer_rows, _fewer_rows, _one_row,
          _summaries, _fewer_vdevs)
