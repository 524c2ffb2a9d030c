"""Run totals that only grow, for Prometheus (docs/prometheus.md): what a counter or a classic
histogram needs, kept from the first event on, whatever the live views drop.

Fed the same events as the other model parts, after them. Per pool: txg sync times as a histogram;
per pool, vdev path and I/O class: the vdev queue's counts and depth integrals, summed over the
processes and vdev_t incarnations that had that path (a lab pass, a re-import), so a counter never
goes back; per pool and vdev path: the vdev_cache counts; per pool: the write throttle's. The ZIL's totals are
the ZIL model's own.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from zfsobs.events import Event
from zfsobs.model.txg import THROTTLE_SUMS
from zfsobs.model.vdev_cache import COUNTERS as VC_COUNTERS

# txg sync time buckets (seconds): a sync takes milliseconds when idle, seconds when dirty data or a
# slow pool holds it, and zfs_txg_timeout (5 s) is the usual ceiling
SYNC_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# the throttle probe's waits by time (txg_thr d0..d5): decades, so the histogram is exact
DELAY_BUCKETS = (1e-5, 1e-4, 1e-3, 1e-2, 0.1)
VQ_COUNTERS = ("enq", "enq_bytes", "issued", "merged", "aggs", "done", "done_bytes", "wait_ns", "dev_ns",
               "pend_ns", "act_ns", "unseen")


@dataclass
class Histogram:
    bounds: tuple
    counts: list = field(default_factory=list)     # per bucket (not cumulative); the last is +Inf
    total: float = 0.0
    n: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)
        i = next((i for i, b in enumerate(self.bounds) if value <= b), len(self.bounds))
        self.counts[i] += 1
        self.total += value
        self.n += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(le, count of observations <= le), +Inf last, as Prometheus wants them."""
        out, seen = [], 0
        for b, c in zip(self.bounds + (float("inf"),), self.counts or [0] * (len(self.bounds) + 1)):
            seen += c
            out.append((b, seen))
        return out


class RunCounters:
    kinds = ("txg", "txg_thr", "vq", "vq_vdev", "vc")

    def __init__(self):
        self.sync: dict[str, Histogram] = {}
        self.throttle: dict[str, Counter] = {}      # pool -> delays, delay_ns, waits, wait_ns, d0..d5
        self.dirty_ratio: dict[str, float] = {}     # pool -> the latest txg's dirty_max / zfs_dirty_data_max
        # the vdev queue per vdev_t incarnation (pid, vd) while it lives; its path comes with its
        # vq_vdev lines, after its first vq lines; a freed one's totals go to its (pool, path, class)
        self.open: dict[tuple, dict] = {}           # (pid, vd) -> {"pool", "path", "cls": {class: ...}}
        self.closed: dict[tuple, Counter] = {}      # (pool, path, class) -> totals of freed incarnations
        self.limits: dict[tuple, tuple] = {}        # (pool, class) -> (max_active, min_active)
        self.vc: dict[tuple, Counter] = {}          # (pool, path) -> totals
        self._vc_last: dict[tuple, dict] = {}

    def feed(self, ev: Event) -> None:
        f = ev.fields
        if ev.kind == "txg":
            self.sync.setdefault(str(f["pool"]), Histogram(SYNC_BUCKETS)).observe(int(f["sync_ns"]) / 1e9)
        elif ev.kind == "txg_thr":       # a txg's lines add up (docs/events.md)
            pool = str(f["pool"])
            self.throttle.setdefault(pool, Counter()).update(
                {k: int(f.get(k) or 0) for k in THROTTLE_SUMS})
            if int(f.get("dirty_data_max") or 0) > 0:
                self.dirty_ratio[pool] = int(f.get("dirty_max") or 0) / int(f["dirty_data_max"])
        elif ev.kind == "vq_vdev":
            key = (int(f.get("pid") or 0), str(f.get("vd")))
            vdev = self.open.get(key)
            if vdev is None:
                return
            vdev["path"] = str(f.get("path", "?"))
            if f.get("final"):      # freed: the next vdev_t at this address starts from 0
                for cls, s in self.open.pop(key)["cls"].items():
                    self.closed.setdefault((vdev["pool"], vdev["path"], cls), Counter()).update(s["totals"])
        elif ev.kind == "vq":
            self._vq(f)
        elif ev.kind == "vc":
            key = (int(f.get("pid") or 0), str(f.get("vd")))
            last = self._vc_last.get(key, {})
            now = {c: int(f.get(c) or 0) for c in VC_COUNTERS}
            totals = self.vc.setdefault((str(f.get("pool")), str(f.get("path", "?"))), Counter())
            totals.update({c: max(0, now[c] - last.get(c, 0)) for c in VC_COUNTERS})
            if f.get("final"):
                self._vc_last.pop(key, None)
            else:
                self._vc_last[key] = now

    def _vq(self, f: dict) -> None:
        key, cls = (int(f.get("pid") or 0), str(f.get("vd"))), int(f.get("class") or 0)
        vdev = self.open.setdefault(key, {"pool": str(f.get("pool")), "path": None, "cls": {}})
        s = vdev["cls"].setdefault(cls, {"last": {}, "totals": Counter(), "depth": (0, 0)})
        now = {c: int(f.get(c) or 0) for c in VQ_COUNTERS}
        # a counter never goes back: a depth integral read one dump early (docs/vdev_queue.md) is
        # caught up by the next line
        s["totals"].update({c: now[c] - s["last"].get(c, 0) for c in VQ_COUNTERS if now[c] > s["last"].get(c, 0)})
        s["last"] = {c: max(now[c], s["last"].get(c, 0)) for c in VQ_COUNTERS}
        s["depth"] = (0, 0) if f.get("final") else (int(f.get("pend") or 0), int(f.get("act") or 0))
        if f.get("max_active") is not None and int(f["max_active"]) >= 0:
            self.limits[(vdev["pool"], cls)] = (int(f["max_active"]), int(f.get("min_active") or 0))

    def by_path(self) -> tuple[dict, dict]:
        """vdev queue totals and depths now per (pool, path, class), over processes and incarnations
        (one whose path has not come yet waits for it)."""
        totals = {k: Counter(c) for k, c in self.closed.items()}
        depth: dict[tuple, list] = {}
        for vdev in self.open.values():
            if vdev["path"] is None:
                continue
            for cls, s in vdev["cls"].items():
                key = (vdev["pool"], vdev["path"], cls)
                totals.setdefault(key, Counter()).update(s["totals"])
                d = depth.setdefault(key, [0, 0])
                d[0] += s["depth"][0]
                d[1] += s["depth"][1]
        return totals, depth
