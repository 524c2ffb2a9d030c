"""Statistics of metric samples over time windows, and a run split at tunable changes
(docs/tuning.md, "Before and after a change"). Pure functions over time-ordered samples: anything
with parallel `.ts` and `.values` sequences (zfsobs/model/samples.py's Track)."""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from zfsobs.model.tuning import Change
from zfsobs.model.stats import percentile

# After a change, what the statistics skip: I/Os issued under the old setting are still in flight,
# and a vdev queue line's act_max covers the 0.5 s before it. Before a change they skip (since, ts],
# the poll interval the change happened in.
SETTLE_NS = 10**9


def between(track, t0: int, t1: int) -> list[float]:
    """Values with t0 <= ts < t1: a sample exactly at a change's time belongs to the segment after it."""
    return list(track.values[bisect_left(track.ts, t0):bisect_left(track.ts, t1)])


def stat(values: list[float]) -> dict:
    """n, mean, p99 (nearest rank: always a value that occurred) and max; None figures when empty."""
    if not values:
        return {"n": 0, "mean": None, "p99": None, "max": None}
    return {"n": len(values), "mean": sum(values) / len(values), "p99": percentile(values, 99),
            "max": max(values)}


def ratio(after: float | None, before: float | None) -> float | None:
    """after / before; None when either is missing, or before is 0 and after is not (no finite
    ratio; JSON has no infinity). 0 -> 0 is 1: nothing changed."""
    if after is None or before is None:
        return None
    if before == 0:
        return 1.0 if after == 0 else None
    return after / before


@dataclass
class Segment:
    index: int
    start: int                  # monotonic ns, inclusive
    end: int                    # exclusive
    opened_by: list[Change] = field(default_factory=list)    # [] for the first segment
    t0: int = 0                 # the window measured: start + SETTLE_NS (not for segment 0) ...
    t1: int = 0                 # ... to the next change's `since` (no sample of unknown setting)


def split(first_ts: int, last_ts: int, changes: list[Change]) -> list[Segment]:
    """Segment 0 runs from the first event to the first change, segment k from change k to the next
    change or past the last event. Changes seen by one poll (the same ts) open one segment."""
    cuts = sorted({c.ts for c in changes})
    starts, ends = [first_ts] + cuts, cuts + [last_ts + 1]
    segs = []
    for i, (s, e) in enumerate(zip(starts, ends)):
        t0, t1 = (s + SETTLE_NS if i else s), last_known(changes, e)
        segs.append(Segment(i, s, e, [c for c in changes if c.ts == s] if i else [], t0, max(t0, t1)))
    return segs


def last_known(changes: list[Change], ts: int) -> int:
    """Up to when the setting before the changes seen at `ts` surely held: their earliest `since`."""
    return min((c.since or ts for c in changes if c.ts == ts), default=ts)


def cuts(changes: list[Change]) -> list[int]:
    """Where sample bins end: at each change and at the poll before it, so no bin mixes settings."""
    return sorted({t for c in changes for t in (c.since, c.ts) if t is not None})


def window_stats(tracks: dict, t0: int, t1: int) -> dict:
    """{key: stat} over [t0, t1) for every track with a sample in it."""
    out = {}
    for key, track in tracks.items():
        st = stat(between(track, t0, t1))
        if st["n"]:
            out[key] = st
    return out


def compare(before: dict, after: dict, both: bool = False) -> dict:
    """{key: {before, after, ratio_mean, ratio_p99}} for two window_stats results: every key seen in
    either (a metric may start or stop at a change), or with both=True only keys seen in both."""
    keys = (before.keys() & after.keys()) if both else (before.keys() | after.keys())
    empty = stat([])
    out = {}
    for key in keys:
        b, a = before.get(key, empty), after.get(key, empty)
        out[key] = {"before": b, "after": a, "ratio_mean": ratio(a["mean"], b["mean"]),
                    "ratio_p99": ratio(a["p99"], b["p99"])}
    return out
