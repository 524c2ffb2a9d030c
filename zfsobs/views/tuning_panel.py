"""The tuning panel: the latest tunable change and, for each metric with samples on both sides of
it, mean and p99 before (since the previous change or the start) and after (since the change), the
ratio, and the recent samples of both sides as a sparkline with the first one after the change
marked. Before any change: one dim line with the watched tunables' values (or nothing)."""
from __future__ import annotations

import math

from rich.console import Group
from rich.text import Text

from zfsobs import safe
from zfsobs.model import Model
from zfsobs.model.samples import order
from zfsobs.model.segments import SETTLE_NS, between, compare, last_known, window_stats
from zfsobs.model.vdev_queue import CLASSES
from zfsobs.views import metrics
from zfsobs.views.box import Box
from zfsobs.views.phrases import Phrases
from zfsobs.views.units import NumericTable, marked_sparkline, wallclock

SPARK = 24          # samples shown: up to half before the change, the rest the latest after it
MAX_ROWS = 8


def height(model: Model, rows: int = MAX_ROWS) -> int:
    """Screen lines the panel takes: none, the one-line list, or a bordered panel."""
    if model.tuning.latest is not None:
        return min(rows, MAX_ROWS) + 4
    return 1 if model.tuning.initial else 0


def render_tuning(model: Model, meta: dict, rows: int, now_ns: int | None):
    """A Box, a one-line Phrases, or None (no tunables watched)."""
    tuning = model.tuning
    change = tuning.latest
    if change is None:
        if not tuning.initial:
            return None
        # one line: the tunables that do not fit are left out, never one cut
        return Phrases(Text("tunables (no change yet):", style="dim"),
                       [Text(safe.text(f"{k}={v}"), style="dim") for k, v in sorted(tuning.initial.items())],
                       sep=" ", max_lines=1)
    now = max(now_ns if now_ns is not None else model.last_ts or 0, change.ts)
    group = tuning.opened_at(change.ts)
    earlier = [c.ts for c in tuning.changes if c.ts < change.ts]
    start = earlier[-1] + SETTLE_NS if earlier else model.first_ts or change.ts
    tracks = model.samples.tracks
    # the same windows as report --compare: no sample of the poll interval the change happened in,
    # none of the settling second after it
    cut = max(start, last_known(tuning.changes, change.ts))
    diff = compare(window_stats(tracks, start, cut), window_stats(tracks, change.ts + SETTLE_NS, now + 1),
                   both=True)
    names = [c.name for c in group]
    keys = sorted(diff, key=lambda k: (not any(related(n, k[1]) for n in names),
                                       -_effect(diff[k]["ratio_mean"]), order(k)))[:min(rows, MAX_ROWS)]
    head = Phrases(Text(wallclock(meta, change.ts), style="bold"),
                   [*(Text.assemble((safe.text(c.name), "bold yellow"), safe.text(f" {c.old} → {c.new}")) for c in group),
                    Text(f"{(now - change.ts) / 1e9:.1f} s ago", style="bold"),
                    Text(f" before: {(change.ts - start) / 1e9:.0f} s up to it, after: since it", style="dim")],
                   max_lines=1 if rows <= 1 else 2)       # a short terminal: the change, not the windows
    pools = {k[0] for k in keys}
    rows, sparks = [], []
    for key in keys:
        pool, metric = key
        d = diff[key]
        b, a = d["before"], d["after"]
        label = metrics.label(metric) + (f" {safe.text(pool)}" if len(pools) > 1 else "")
        r = d["ratio_mean"]
        rows.append([label, metrics.value(metric, b["mean"]), metrics.value(metric, b["p99"]),
                     metrics.value(metric, a["mean"]), metrics.value(metric, a["p99"]),
                     Text(metrics.ratio(r), style="bold" if _effect(r) > math.log(1.2) else "dim")])
        sparks.append(_spark(tracks[key], start, change.ts, now + 1))
    table = NumericTable(("metric", "before mean", "before p99", "after mean", "after p99", "ratio"), rows,
                         ("before │ after", sparks), drop=("before p99", "after p99"), left=("metric",))
    if not keys:
        table = Text("no metric has samples on both sides of the change yet", style="dim")
    return Box(Group(head, table), title="tuning", title_align="left")


def _effect(r: float | None) -> float:
    """How far a ratio is from 1, either way (2x and 0.5x alike)."""
    return abs(math.log(r)) if r else 0.0


def _spark(track, start: int, cut: int, end: int) -> Text:
    before = between(track, start, cut)[-(SPARK // 2):]
    after = between(track, cut, end)
    after = after[-(SPARK - len(before)):]
    return marked_sparkline(before + after, SPARK, "cyan", marks=[len(before)])


def related(tunable: str, metric: str) -> bool:
    """Whether a metric is what the tunable acts on, so its row comes first."""
    group, *rest = metric.split(".")
    if group == "vq":
        if f"_{rest[0]}_" in tunable:        # not "sync_write" in "zfs_vdev_async_write_max_active"
            return True
        return tunable.startswith("zfs_vdev_") and not any(c in tunable for c in CLASSES) \
            and "cache" not in tunable
    if group == "vc":
        return "vdev_cache" in tunable
    if group == "zil":
        return tunable.startswith("zil_") or "commit" in tunable or "immediate_write" in tunable
    return "txg" in tunable or "dirty" in tunable or "delay" in tunable
