"""The txg panel: per pool, the latest txgs (sync time, interval, dirty data, the write throttle,
state times) and sync-time statistics over the last minute (or the part of it the model holds), with a sparkline of recent sync times on which the
first txg after each tunable change is marked."""
from __future__ import annotations

from rich.console import Group
from rich.text import Text

from zfsobs import safe
from zfsobs.model.stats import percentile
from zfsobs.model.txg import TxgModel
from zfsobs.model import txg as txg_model
from zfsobs.views.box import Box
from zfsobs.views.phrases import Phrases
from zfsobs.views.units import Tail, marked_sparkline, mib, ms, NumericTable
from zfsobs.views.window import label as window_label

BAR_WIDTH = 24


def render_txg(model: TxgModel, rows_per_pool: int, changes: list[int] = (), lines: int = 2, spark: bool = True,
               since: int | None = None) -> Box:
    """`rows_per_pool` 0: the summary lines only. `changes`: monotonic ns of tunable changes, marked on the
    sparkline. `lines`: the summary's most lines (its last phrases go first); `spark` False: no sparkline.
    `since`: the model's first event (the window label says the part of the minute after it)."""
    if not model.pools:
        return Box(Text("waiting for the first txg sync…", style="dim"), title="txg sync")
    parts = []
    for pool in sorted(model.pools):
        parts.extend(_pool(model, pool, rows_per_pool, changes, lines, spark, since))
    return Box(Group(*parts), title="txg sync", title_align="left")


def _pool(model: TxgModel, pool: str, nrows: int, changes, nlines: int = 2, spark_on: bool = True,
          since: int | None = None) -> list:
    held = model.pools[pool]
    window = held.window()
    st = model.stats(pool, window)
    s, iv, dirty = st["sync_ns"], st["interval_ns"], st["dirty_bytes"]
    # the window counts back from the newest row's start (model/txg.py); the view holds what came since its first event
    span = window_label(txg_model.WINDOW_NS, held.rows[-1].start_ns, since)
    phrases = [f"{span}: {st['txgs']} txgs", f"sync ms p50 {ms(s['p50'])}", f"p99 {ms(s['p99'])}",
               f"max {ms(s['max'])}"]
    th = st["throttle"]
    if th:      # the write throttle (docs/txg.md): how full dirty data got, and what writers waited
        pct = th["dirty_pct"]["max"]
        style = "bold red" if th["delay_count"] else ""
        # the limit by value (the latest txg's zfs_dirty_data_max): the demo lab's 8 MiB reads as small
        limit = next((r for r in reversed(window) if (r.dirty_data_max or 0) > 0), None)
        phrases += [Text(f"throttle: {th['delay_count']} delayed in {th['txgs_delayed']} txgs", style=style),
                    Text(f"dirty max {'-' if pct is None else f'{pct:.0f}'}% of "
                         + (f"{mib(limit.dirty_data_max)} MiB" if limit else "max"), style=style)]
        # nothing delayed: say where delays begin, so a quiet throttle reads as a state, not a fault
        phrases.append(Text(f"delay mean {ms(th['delay_mean_ns'])} max {ms(th['delay_max_ns'])} ms", style=style)
                       if th["delay_count"] else
                       Text("delays begin past zfs_delay_min_dirty_percent of zfs_dirty_data_max"
                            + (f" ({limit.delay_min_pct}% of {mib(limit.dirty_data_max)} MiB)"
                               if limit and limit.delay_min_pct is not None else ""), style="dim"))
    phrases += [f"interval ms p50 {ms(iv['p50'])}", f"dirty MiB mean {mib(dirty['mean'])}",
                f"max {mib(dirty['max'])}"]
    line = Phrases(Text(safe.text(pool), style="bold"), phrases, max_lines=nlines)
    # a txg event comes at sync end: the first txg that ended at or after a change is its first
    # sample; only changes between two txgs of the window (an older one would mark the first)
    ends = [r.start_ns + r.sync_ns for r in window]
    marks = [next((i for i, t in enumerate(ends) if t >= c), 0) for c in changes]
    spark = Tail(Text("sync  ", style="dim"), marked_sparkline([r.sync_ns for r in window], 100, "cyan",
                                                               [i for i in marks if i > 0]))
    head = [line, spark] if spark_on else [line]
    if nrows <= 0:
        return head
    # bars run to the window's p90 sync time, so one slow sync does not flatten the rest; a longer one
    # is a full bar ended by ▸ (clipped)
    top = _p90([r.sync_ns for r in window]) or 1
    rows, bars = [], []
    for r in list(window)[-nrows:][::-1]:
        style = "red" if r.sync_ns >= (s["p99"] or 0) and len(window) > 10 else "green"
        over = r.sync_ns > top
        bars.append(Text("█" * max(1, min(BAR_WIDTH, round(r.sync_ns / top * BAR_WIDTH))) + ("▸" if over else ""),
                         style=style))
        pct = r.dirty_pct
        throttle = ["-" if pct is None else f"{pct:.0f}", str(r.delay_count or 0), ms(r.delay_ns or 0)] if th else []
        rows.append([str(r.txg), str(r.pid), ms(r.sync_ns), ms(r.interval_ns), mib(r.dirty_bytes), *throttle,
                     ms(r.open_ns), ms(r.quiesce_ns), ms(r.wait_ns)])
    headers = ("txg", "pid", "sync ms", "interval ms", "dirty MiB") + (("dirty %", "delayed", "delay ms") if th else ()) \
        + ("open ms", "quiesce ms", "wait ms")
    table = NumericTable(headers, rows, ("sync time to p90 (▸ over)", bars), drop=("wait ms", "quiesce ms", "pid", "open ms"))
    return [*head, table]


def _p90(values: list[int]) -> int:
    """The 90th percentile of the values (nearest rank, as every figure's): the bars' full scale."""
    return percentile(values, 90) or 0
