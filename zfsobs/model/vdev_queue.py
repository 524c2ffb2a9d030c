"""vdev queue depth per leaf vdev and I/O class (docs/vdev_queue.md), from the vdev_queue probe.

The probe's lines are cumulative per (pid, vdev_t address, class): counters, and the time integral
of pending and active depth up to the line's timestamp, with the depth at that moment. Depth only
changes at events, and a vdev with no events emits no lines, so the integral at any later time t is
the last line's integral plus its depth times (t - its ts): means over any window are exact.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field

from zfsobs.events import Event
from zfsobs.model.cumulative import value_at

CLASSES = ("sync_read", "sync_write", "async_read", "async_write", "scrub", "removal",
           "initializing", "trim", "rebuild")
SHORT = ("syncR", "syncW", "asyncR", "asyncW", "scrub", "remov", "init", "trim", "rebld")
COUNTERS = ("enq", "enq_bytes", "issued", "merged", "aggs", "done", "done_bytes", "wait_ns", "dev_ns",
            "pend_ns", "act_ns", "untracked", "untracked_act", "unseen")
BUCKETS = 24
BUCKET_FIELDS = tuple(f"b{b}" for b in range(BUCKETS))
KEEP_NS = 600 * 10**9        # history kept per series (live windows, vqstat intervals)
PRUNE_NS = 10 * 10**9        # live: how often series idle for KEEP_NS are forgotten


def lat_bucket(ns: int) -> int:
    """The probe's bucket for a wait or device time (the same shifts as probes/linux/vdev_queue.bt)."""
    b, x = 0, ns >> 11
    while x > 0 and b < BUCKETS - 1:
        x >>= 1
        b += 1
    return b


def lat_bounds(b: int) -> tuple[int, float]:
    """[low, high) in ns of the probe's wait/device histogram bucket b."""
    low = 0 if b == 0 else 1024 << b
    return low, float("inf") if b == BUCKETS - 1 else 2048 << b


def quantile(hist: list[int], q: float) -> int | None:
    """Nearest-rank quantile as its bucket's upper bound (the last bucket: its lower bound)."""
    total = sum(hist)
    if not total:
        return None
    rank, seen = max(1, round(q * total)), 0
    for b, n in enumerate(hist):
        seen += n
        if seen >= rank:
            low, high = lat_bounds(b)
            return int(high) if high != float("inf") else low
    return None


def _crosses(cuts: list[int], start: int, end: int) -> bool:
    """Whether a cut lies in (start, end)."""
    i = bisect_right(cuts, start)
    return i < len(cuts) and cuts[i] < end


@dataclass
class Line:
    ts: int
    values: dict            # COUNTERS, cumulative
    pend: int
    act: int
    pend_max: int
    act_max: int
    max_active: int | None = None     # the class's limit when the line was made


@dataclass
class Series:
    """One class of one vdev in one process."""
    pid: int
    vd: str
    cls: int
    gen: int = 0
    max_active: int | None = None
    min_active: int | None = None
    lines: deque = field(default_factory=deque)
    hist: dict = field(default_factory=lambda: {0: [0] * BUCKETS, 1: [0] * BUCKETS})   # latest, cumulative
    final: bool = False
    first: Line | None = None      # kept for whole-capture figures when old lines are dropped
    peak_pend: int = 0
    peak_act: int = 0

    def add(self, ts: int, f: dict) -> None:
        values = {c: int(f.get(c) or 0) for c in COUNTERS}
        line = Line(ts, values, int(f.get("pend") or 0), int(f.get("act") or 0),
                    int(f.get("pend_max") or 0), int(f.get("act_max") or 0), f.get("max_active"))
        self.lines.append(line)
        self.first = self.first or line
        self.peak_pend = max(self.peak_pend, line.pend_max, line.pend)
        self.peak_act = max(self.peak_act, line.act_max, line.act)
        self.max_active, self.min_active = f.get("max_active"), f.get("min_active")
        self.final = bool(f.get("final"))
        while len(self.lines) > 2 and ts - self.lines[1].ts > KEEP_NS:
            self.lines.popleft()

    def add_hist(self, kind: int, buckets: list[int]) -> None:
        self.hist[kind] = buckets

    @property
    def last(self) -> Line:
        return self.lines[-1]

    def limit_in(self, t0: int, t1: int) -> int | None:
        """The highest max_active the lines stamped in [t0, t1) read (None: no line there; an
        idle vdev's last line may be from before a change)."""
        lo, hi = self._index(t0 - 1) + 1, self._index(t1 - 1) + 1
        return max((self.lines[i].max_active for i in range(lo, hi) if self.lines[i].max_active is not None),
                   default=None)

    def _index(self, t: int) -> int:
        """Index of the latest line at or before t (-1: none)."""
        return bisect_right(self.lines, t, key=lambda ln: ln.ts) - 1

    def at(self, t: int) -> dict | None:
        """Cumulative values at time t. Between two lines: interpolated (what happened between them is
        only known in sum; lines come every 0.5 s while a vdev is busy). After the last line: the
        integrals grow by the depth it reported, which is exact since a vdev with events would have
        sent another line."""
        i, out = value_at(self.lines, t, COUNTERS)
        if out is None:
            return None
        ln = self.lines[i]
        if i + 1 == len(self.lines):
            out["pend_ns"] += ln.pend * (t - ln.ts)
            out["act_ns"] += ln.act * (t - ln.ts)
        out["pend"], out["act"] = ln.pend, ln.act
        return out

    def window(self, t0: int, t1: int, cuts: list[int] | None = None) -> dict | None:
        """Deltas over [t0, t1], mean depths, and the max depth seen in it. A line's maxima cover
        the time since the line before. Without `cuts` the first line after t1 counts too (the
        max over the window's tail: vqstat --max); with them only lines inside, and of those only
        ones whose span since the line before crosses no cut (a tunable change: the maxima of an
        idle vdev's next line can be seconds old)."""
        end = self.at(t1)
        if end is None:
            return None
        start = self.at(t0)
        if start is None:          # the series began inside the window: measure from its first line
            first = self.lines[0]
            t0, start = first.ts, self.at(first.ts)
            if t1 <= t0:
                return None
        span = t1 - t0
        out = {c: end[c] - start[c] for c in COUNTERS}
        out["seconds"] = span / 1e9
        out["pend_mean"] = out["pend_ns"] / span
        out["act_mean"] = out["act_ns"] / span
        lo, hi = self._index(t0) + 1, min(self._index(t1) + 1 + (cuts is None), len(self.lines))
        inside = [self.lines[i] for i in range(lo, hi)]
        spans = [ln for i, ln in zip(range(lo, hi), inside)
                 if cuts is None or not _crosses(cuts, self.lines[i - 1].ts if i else ln.ts, ln.ts)]
        out["pend_max"] = max([start["pend"]] + [ln.pend_max for ln in spans] + [ln.pend for ln in inside])
        out["act_max"] = max([start["act"]] + [ln.act_max for ln in spans] + [ln.act for ln in inside])
        out["pend"], out["act"] = end["pend"], end["act"]
        return out


@dataclass
class Vdev:
    pid: int
    vd: str
    pool: str = "?"
    path: str = "?"
    guid: int | None = None
    vdev_max: int | None = None
    final: bool = False
    final_ts: int = 0


class VdevQueueModel:
    kinds = ("vq", "vq_lat", "vq_vdev")

    def __init__(self, prune: bool = False):
        # live: forget series idle for KEEP_NS (ztest makes new processes and vdevs all the time,
        # 4 MiB a minute otherwise); a report keeps everything
        self.prune = prune
        self._pruned = 0
        self.series: dict[tuple, Series] = {}       # (pid, vd, generation, class)
        self.vdevs: dict[tuple, Vdev] = {}          # (pid, vd, generation)
        self._gen: dict[tuple[int, str], int] = {}  # a vdev_t address freed and used again: a new vdev
        self.last_ts: int | None = None
        self.unknown_class = 0      # lines of an I/O class this zfsobs has no name for: left out

    def feed(self, ev: Event) -> None:
        f = ev.fields
        if ev.kind != "vq_vdev" and not 0 <= int(f.get("class") or 0) < len(CLASSES):
            self.unknown_class += 1
            return
        pid, vd = int(f.get("pid") or 0), str(f.get("vd"))
        self.last_ts = ev.ts if self.last_ts is None else max(self.last_ts, ev.ts)
        if self.prune and self.last_ts - self._pruned > PRUNE_NS:
            self._forget_idle()
        gen = self._gen.get((pid, vd), 0)
        vdev = self.vdevs.get((pid, vd, gen))
        if vdev is not None and vdev.final and ev.ts > vdev.final_ts:
            gen = self._gen[(pid, vd)] = gen + 1
            vdev = None
        if vdev is None:
            if ev.kind == "vq_lat":
                return
            vdev = self.vdevs[(pid, vd, gen)] = Vdev(pid, vd)
        if ev.kind == "vq_vdev":
            vdev.pool, vdev.path = str(f.get("pool")), str(f.get("path", "?"))
            vdev.guid, vdev.vdev_max, vdev.final = f.get("guid"), f.get("vdev_max"), bool(f.get("final"))
            vdev.final_ts = ev.ts
            return
        cls = int(f.get("class") or 0)
        if ev.kind == "vq":
            vdev.pool = str(f.get("pool"))
        s = self.series.get((pid, vd, gen, cls))
        if s is None:
            if ev.kind != "vq":     # histograms follow their vq line; alone they are another pool's
                return
            s = self.series[(pid, vd, gen, cls)] = Series(pid, vd, cls, gen)
        if ev.kind == "vq":
            s.add(ev.ts, f)
        else:
            s.add_hist(int(f.get("kind") or 0), [int(f.get(b) or 0) for b in BUCKET_FIELDS])

    def _forget_idle(self) -> None:
        self._pruned = self.last_ts
        old = self.last_ts - KEEP_NS
        self.series = {k: s for k, s in self.series.items() if s.lines and s.lines[-1].ts >= old}
        busy = {k[:3] for k in self.series}
        self.vdevs = {k: v for k, v in self.vdevs.items() if k in busy or v.final_ts >= old}
        known = {k[:2] for k in self.vdevs}
        self._gen = {k: g for k, g in self._gen.items() if k in known}

    def vdev(self, s: Series) -> Vdev:
        return self.vdevs[(s.pid, s.vd, s.gen)]

    def window(self, seconds: float, now: int | None = None) -> list[tuple[Vdev, Series, dict]]:
        """Every series with events in the last `seconds` (or depth left over), sorted by pool, path, class."""
        now = self.last_ts if now is None else now
        if now is None:
            return []
        return self.between(now - int(seconds * 1e9), now)

    def between(self, t0: int, t1: int, cuts: list[int] | None = None) -> list[tuple[Vdev, Series, dict]]:
        """Every series with events in [t0, t1] (or depth left over), sorted by pool, path, class."""
        rows = []
        for s in self.series.values():
            # ended before t0, or idle since: its window would be all zeros (most series of a
            # long run are of ztest passes gone by; skipping them is most of a second's binning)
            if not s.lines or (s.last.ts < t0 and (s.final or not (s.last.pend or s.last.act))):
                continue
            w = s.window(t0, t1, cuts)
            if w is None or not (w["enq"] or w["done"] or w["pend_max"] or w["act_max"]):
                continue
            rows.append((self.vdev(s), s, w))
        rows.sort(key=lambda r: (r[0].pool, r[0].path, r[0].pid, r[1].cls))
        return rows

    def totals(self) -> list[tuple[Vdev, Series, dict]]:
        """Whole-capture figures per series: counts since first seen; means over first..last line."""
        rows = []
        for s in self.series.values():
            if not s.lines:
                continue
            first, last = s.first, s.last
            span = last.ts - first.ts
            out = dict(last.values)
            for kind in ("pend", "act"):
                out[kind + "_mean"] = (last.values[kind + "_ns"] - first.values[kind + "_ns"]) / span if span else None
            out["pend_max"], out["act_max"] = s.peak_pend, s.peak_act
            out["seconds"] = span / 1e9
            rows.append((self.vdev(s), s, out))
        # a total order: the same whatever came first (a report from digests: zfsobs/capture/digest.py)
        rows.sort(key=lambda r: (r[0].pool, r[0].path, r[0].pid, r[1].cls, r[1].vd, r[1].gen))
        return rows
