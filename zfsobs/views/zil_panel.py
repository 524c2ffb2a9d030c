"""The ZIL panel: per pool, commits and commit latency over the last minute (or the part of it the
model holds) with a small latency histogram, log bytes/s now and its max 1-second rate, and the
latest txgs with ZIL activity joined with their sync time from the txg panel."""
from __future__ import annotations

from rich.console import Group
from rich.text import Text

from zfsobs import safe
from zfsobs.model import Model
from zfsobs.model.zil import lat_bounds, lat_quantile
from zfsobs.views.box import Box
from zfsobs.views.na import blank, unavailable
from zfsobs.views.phrases import Phrases
from zfsobs.views.units import ms, NumericTable, size, sparkline
from zfsobs.views.window import label as window_label

WINDOW_NS = 60 * 10**9
RATE_NS = 5 * 10**9
SIZES = ("lwb_le4k", "lwb_4to32k", "lwb_ge32k")
COLUMNS = ("txg", "sync ms", "commits", "lat p50 ms", "lat max ms", "itxs", "write KiB", "lwbs",
           "N-Bytes", "B-Bytes", "<=4kB", "4-32kB", ">=32kB")


def render_zil(model: Model, rows_per_pool: int, now_ns: int | None, lines: int = 2, hist: bool = True) -> Box:
    """`lines`: the summary's most lines (its last phrases go first); `hist` False: no latency histogram."""
    zil = model.zil
    if not zil.pools:
        note = "no ZIL activity yet (commits come from fsync, O_SYNC, sync=always)"
        return Box(Text(note, style="dim"), title="ZIL", title_align="left")
    now = now_ns if now_ns is not None else model.last_ts or 0
    parts = []
    for pool in sorted(zil.pools):
        parts.extend(_pool(model, pool, rows_per_pool, now, lines, hist))
    return Box(Group(*parts), title="ZIL (per txg open when it happened)", title_align="left")


def _pool(model: Model, pool: str, nrows: int, now: int, nlines: int = 2, hist_on: bool = True) -> list:
    state = model.zil.pools[pool]
    window = state.window(now - WINDOW_NS)
    na = unavailable(model, "zil")               # kstat mode: no latency, itxs or block sizes
    st = blank(model.zil.stats(pool, window), na)
    rate = state.bytes_between(now - RATE_NS, now) / (RATE_NS / 1e9)
    top = state.max_rate(now - WINDOW_NS, now)
    latency = ["latency -"] if "lat_ns" in na else [
        f"latency ms p50 ≤{ms(st['lat_p50_ns'], 3)}", f"p99 ≤{ms(st['lat_p99_ns'], 3)}", f"max {ms(st['lat_max_ns'], 3)}"]
    line = Phrases(Text(safe.text(pool), style="bold"),
                   [f"{window_label(WINDOW_NS, now, model.first_ts)}: {st['commits']} commits", *latency, f"N-Bytes/s {size(int(rate))}",
                    f"max {size(int(top))}/s"], max_lines=nlines)
    parts = [line]
    hist = _histogram(st["lat_hist"] or []) if hist_on else None
    if hist is not None:
        parts.append(hist)
    if nrows <= 0:
        return parts
    txgs = model.txg.pools.get(pool)
    syncs = {(r.pid, r.txg): r.sync_ns for r in txgs.window()} if txgs else {}
    rows = []
    for r in window[-nrows:][::-1]:
        c = r.counts
        cells = (ms(lat_quantile(r.lat_hist, 0.5, r.lat_max_ns), 3), ms(r.lat_max_ns if c["commits"] else None, 3),
                 str(c["itxs"]), f"{c['write_bytes'] / 1024:.1f}", str(c["lwbs"]), str(c["nused"]), str(c["size"]),
                 str(c["lwb_le4k"]), str(c["lwb_4to32k"]), str(c["lwb_ge32k"]))
        made_of = ("lat_ns", "lat_ns", "itxs", "write_bytes", "lwbs", "nused", "size", *SIZES)
        rows.append([str(r.txg) + ("" if r.final else "*"), ms(syncs.get((r.pid, r.txg))), str(c["commits"]),
                     *("-" if f in na else v for f, v in zip(made_of, cells))])
    table = NumericTable(COLUMNS, rows, drop=(">=32kB", "4-32kB", "<=4kB", "B-Bytes", "write KiB", "itxs",
                                             "lat max ms", "sync ms"))
    parts.append(table)
    return parts


def _histogram(hist: list[int]) -> Text | None:
    """Commit latency as one sparkline over the occupied bucket range, labelled at both ends."""
    used = [i for i, n in enumerate(hist) if n]
    if not used:
        return None
    lo, hi = used[0], used[-1]
    return Text.assemble(("commit latency ", "dim"), (f"{_label(lat_bounds(lo)[0])} ", "dim"),
                         (sparkline(hist[lo:hi + 1], 60), "magenta"),
                         (f" {_label(lat_bounds(hi)[1])}", "dim"), no_wrap=True, overflow="ellipsis")


def _label(ns: float) -> str:
    if ns == float("inf"):
        return "∞"
    if ns < 1e6:
        return f"{ns / 1e3:.0f}µs"
    return f"{ns / 1e6:.1f}ms" if ns < 1e9 else f"{ns / 1e9:.1f}s"
