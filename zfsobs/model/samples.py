"""Time-stamped samples per pool and metric, for statistics over any window (before and after a
tunable change: zfsobs/model/segments.py, docs/tuning.md). Built from what the other model parts
already derive, so a sample means what the panels and the report mean.

  txg.sync_ns, txg.interval_ns, txg.dirty_bytes     one per synced txg, at its txg event
  txg.delays, txg.delay_ns, txg.dirty_pct           one per synced txg, at its txg event, while the
                                                    throttle is traced: its delayed transactions,
                                                    their time, the highest dirty data (% of max)
  zil.commits, zil.nused_bytes, zil.size_bytes,     one per synced txg, at its txg event: the txg's
  zil.lat_mean_ns                                   finished ZIL row (zeros when the ZIL was idle)
  vq.<class>.pend_mean, act_mean, act_max,          one per 1 s bin in which the class was busy,
  vq.<class>.wait_mean_ns, max_active               summed over the pool's leaf vdevs, at the bin start
  vc.hit_ratio, vc.inflation, vc.amplification     one per 1 s bin with reads, while the cache is on

Bins never straddle a tunable change: one ends at the poll before it, one at the change (segments.cuts).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter, deque

from zfsobs.events import Event
from zfsobs.model.segments import cuts
from zfsobs.model.tuning import TuningModel
from zfsobs.model.txg import TxgModel
from zfsobs.model.vdev_cache import VdevCacheModel, derive
from zfsobs.model.vdev_queue import CLASSES, VdevQueueModel
from zfsobs.model.zil import ZilModel

BIN_NS = 10**9
GRACE_NS = 2 * 10**9    # a bin is measured once every busy vdev has reported past it (vq 0.5 s, vc 1 s)
JOIN_NS = 10**9         # the zil and txg probes are two processes: wait this long for a txg's ZIL row
# bins starting this long after the latest vq/vc line are stepped over, not measured: every busy vdev
# reports twice a second, so they hold nothing, and a gap of years costs no more than one of seconds
GAP_NS = 10 * 10**9
KEEP_NS = 600 * 10**9   # live and replay keep the last 10 minutes
GROUPS = ("txg", "zil", "vq", "vc")
NAMES = ("sync_ns", "interval_ns", "dirty_bytes", "dirty_pct", "delays", "delay_ns", "commits", "nused_bytes",
         "size_bytes", "lat_mean_ns", "pend_mean", "act_mean", "act_max", "max_active", "wait_mean_ns", "hit_ratio", "inflation",
         "amplification")


class Track:
    """One metric's samples of one pool: parallel, time-ordered lists."""
    __slots__ = ("ts", "values")

    def __init__(self):
        self.ts: list[int] = []
        self.values: list[float] = []

    def add(self, ts: int, value: float) -> None:
        i = len(self.ts) if not self.ts or ts >= self.ts[-1] else bisect_right(self.ts, ts)
        self.ts.insert(i, ts)
        self.values.insert(i, value)

    def prune(self, before: int) -> None:
        i = bisect_left(self.ts, before)
        del self.ts[:i], self.values[:i]


def order(key: tuple[str, str]) -> tuple:
    """Display order: pool, then txg, zil, vdev queue by class number, vdev_cache."""
    pool, metric = key
    group, _, rest = metric.partition(".")
    cls, _, name = rest.rpartition(".")
    rank = GROUPS.index(group) if group in GROUPS else len(GROUPS)
    return (pool, rank, CLASSES.index(cls) if cls in CLASSES else -1,
            NAMES.index(name) if name in NAMES else len(NAMES), metric)


class SampleModel:
    # not "tunable": the watcher's polls run ahead of the probes' lines, and bins must wait for those
    kinds = ("txg", "zil", "vq", "vc")

    def __init__(self, zil: ZilModel, vq: VdevQueueModel, vc: VdevCacheModel, tuning: TuningModel,
                 probes: dict, keep_ns: int | None = KEEP_NS, txg: TxgModel | None = None):
        self.zil, self.vq, self.vc, self.tuning, self.probes, self.txg = zil, vq, vc, tuning, probes, txg
        self.keep_ns = keep_ns
        self.tracks: dict[tuple[str, str], Track] = {}    # (pool, metric) -> samples
        self._pending: deque[tuple] = deque()             # synced txgs waiting for their ZIL row
        self._bin: int | None = None                      # start of the next vq/vc bin to measure
        self._io_last: int | None = None                  # the latest vq/vc line
        self._clock: int | None = None
        self._pruned = 0
        # bins ending at or before this are stepped over, not measured: replay's far seek feeds
        # the digests up to a time whose bins it will have pruned (zfsobs/views/replay.py)
        self.measure_from: int | None = None

    def feed(self, ev: Event) -> None:
        self._clock = ev.ts if self._clock is None else max(self._clock, ev.ts)
        if ev.kind == "txg":
            self._txg(ev)
        elif ev.kind in ("vq", "vc"):
            self._bin = ev.ts if self._bin is None else self._bin
            self._io_last = ev.ts if self._io_last is None else max(self._io_last, ev.ts)
        self._advance(self._clock - JOIN_NS, self._clock - GRACE_NS)
        if self.keep_ns is not None and self._clock - self._pruned > BIN_NS:
            self._pruned = self._clock
            for track in self.tracks.values():
                track.prune(self._clock - self.keep_ns)

    def settle(self) -> None:
        """Measure what is still waiting (the last txgs and bins): the capture is complete."""
        if self._clock is not None:
            self._advance(self._clock, self._io_last if self._io_last is not None else self._clock,
                          partial=True)

    def keys(self) -> list[tuple[str, str]]:
        return sorted(self.tracks, key=order)

    def _add(self, pool: str, metric: str, ts: int, value) -> None:
        track = self.tracks.get((pool, metric))
        if track is None:
            track = self.tracks[(pool, metric)] = Track()
        track.add(ts, value)

    def _txg(self, ev: Event) -> None:
        f = ev.fields
        pool = str(f["pool"])
        self._add(pool, "txg.sync_ns", ev.ts, f["sync_ns"])
        for field, metric in (("interval_ns", "txg.interval_ns"), ("dirty", "txg.dirty_bytes")):
            if f.get(field) is not None:
                self._add(pool, metric, ev.ts, f[field])
        self._pending.append((ev.ts, pool, int(f.get("pid") or 0), int(f["txg"]), int(f["start"])))

    def _advance(self, joined_until: int, binned_until: int, partial: bool = False) -> None:
        while self._pending and self._pending[0][0] <= joined_until:
            self._zil(*self._pending.popleft())
        while self._bin is not None:
            if self._io_last is not None and self._bin > self._io_last + GAP_NS and self._bin < binned_until:
                self._bin += (binned_until - self._bin) // BIN_NS * BIN_NS    # silence: no line to bin
            end = self._bin_end(self._bin)
            if end > binned_until:
                if not partial or binned_until <= self._bin:
                    return
                end = binned_until
            if self.measure_from is None or end > self.measure_from:
                self._measure(self._bin, end)
            self._bin = end

    def _bin_end(self, start: int) -> int:
        """start + 1 s, or the next cut (a change, or the poll before it) if it comes sooner."""
        ends = cuts(self.tuning.changes)
        i = bisect_right(ends, start)
        return min(start + BIN_NS, ends[i]) if i < len(ends) else start + BIN_NS

    def _zil(self, ts: int, pool: str, pid: int, txg: int, start: int) -> None:
        self._throttle(ts, pool, pid, txg, start)
        state = self.zil.pools.get(pool)
        if state is None and "zil" not in self.probes:
            return          # no ZIL probe: no figures, rather than zeros
        row = state.at_sync(pid, txg, start) if state is not None else None
        counts = row.counts if row is not None else Counter()
        for name in ("commits", "nused", "size"):
            self._add(pool, "zil." + name + ("_bytes" if name != "commits" else ""), ts, counts[name])
        if counts["commits"]:
            self._add(pool, "zil.lat_mean_ns", ts, counts["lat_ns"] / counts["commits"])

    def _throttle(self, ts: int, pool: str, pid: int, txg: int, start: int) -> None:
        """The txg's write throttle, once its line had time to come (a txg with none had nothing
        delayed); nothing while the throttle is not traced."""
        if self.txg is None or not self.txg.throttled or pool not in self.txg.pools:
            return
        row = next((r for r in reversed(self.txg.pools[pool].rows) if r.txg == txg and r.pid == pid
                    and r.start_ns == start), None)
        if row is None:
            return
        traced = row.delay_count is not None      # no line: nothing delayed
        self._add(pool, "txg.delays", ts, row.delay_count if traced else 0)
        if row.delay_ns is not None or not traced:      # kstat mode counts delays, not their time
            self._add(pool, "txg.delay_ns", ts, row.delay_ns or 0)
        if row.dirty_pct is not None:
            self._add(pool, "txg.dirty_pct", ts, row.dirty_pct)

    def _measure(self, t0: int, t1: int) -> None:
        self._vq(t0, t1)
        self._vc(t0, t1)

    def _vq(self, t0: int, t1: int) -> None:
        pools: dict[tuple[str, int], dict] = {}
        # no depth after t1 (that time may be a change's), no maxima of a span across a change
        for vdev, s, w in self.vq.between(t0, t1, cuts(self.tuning.changes)):
            a = pools.setdefault((vdev.pool, s.cls), {"pend_mean": 0.0, "act_mean": 0.0, "act_max": 0,
                                                       "wait_ns": 0.0, "waits": 0.0, "max_active": None})
            a["pend_mean"] += max(0.0, w["pend_mean"])     # a hair below 0 is rounding
            a["act_mean"] += max(0.0, w["act_mean"])
            a["act_max"] = max(a["act_max"], w["act_max"])  # per vdev, as the limit is
            a["wait_ns"] += w["wait_ns"]
            a["waits"] += w["issued"] + w["merged"]
            limit = s.limit_in(t0, t1)         # not s.max_active: that may be newer than the bin
            if limit is not None:
                a["max_active"] = max(a["max_active"] or 0, limit)
        for (pool, cls), a in pools.items():
            prefix = f"vq.{CLASSES[cls]}."
            for name in ("pend_mean", "act_mean", "act_max", "max_active"):
                if a[name] is not None:
                    self._add(pool, prefix + name, t0, a[name])
            if a["waits"] > 0:
                self._add(pool, prefix + "wait_mean_ns", t0, a["wait_ns"] / a["waits"])

    def _vc(self, t0: int, t1: int) -> None:
        on = {v.pool for v in self.vc.vdevs.values() if v.size > 0}
        if not on:
            return
        for pool, w in self.vc.stamped_by_pool(t0, t1, cuts(self.tuning.changes)).items():
            if pool not in on or w["reads"] <= 0:
                continue
            d = derive(w)
            # device/asked over the reads the cache decided in the bin: a line counts a read when it
            # enters and when it is decided, often on the next line, and with one or two reads per
            # line the report's device/read_bytes swings either way
            decided = w["declined_bytes"] + w["hit_bytes"] + w["miss_bytes"]
            d["amplification"] = d["device_bytes"] / decided if decided else None
            for name in ("hit_ratio", "inflation", "amplification"):
                if d[name] is not None:
                    self._add(pool, "vc." + name, t0, d[name])
