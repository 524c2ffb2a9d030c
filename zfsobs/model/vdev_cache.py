"""vdev_cache inflation: per leaf vdev, reads offered to the cache and what the device read for
them (probes/linux/vdev_cache.bt). Lines are cumulative per vdev; windows are differences.

The state of the cache comes in three kinds, shown the same way everywhere:
  active    zfs_vdev_cache_size > 0 in a traced process: figures
  disabled  the cache code runs but zfs_vdev_cache_size is 0 (the default since 2011)
  absent    the ZFS build has no vdev cache (removed in OpenZFS 2.2.0)
"""
from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from zfsobs.events import Event
from zfsobs.fields import VDEV_CACHE_COUNTS as COUNTERS
from zfsobs.model.cumulative import value_at
KEEP_NS = 600 * 10**9
PRUNE_NS = 10 * 10**9     # live: how often vdevs idle for KEEP_NS are forgotten
ENABLE_HINT = ("set zfs_vdev_cache_size (bytes per leaf vdev; kernel: at module load, "
               "modprobe zfs zfs_vdev_cache_size=N; lab: --option zfs_vdev_cache_size=N)")


class Sample(NamedTuple):
    ts: int
    values: dict


@dataclass
class Vdev:
    """One leaf vdev in one process, from the first line to vdev_free (final)."""
    pid: int
    vd: str
    gen: int
    pool: str = "?"
    path: str = "?"
    guid: int | None = None
    size: int = 0                 # the tunables of its last line
    max: int | None = None
    bshift: int | None = None
    final: bool = False
    lines: deque = field(default_factory=deque)      # Sample(ts, {counter: cumulative})

    def add(self, ev: Event) -> None:
        f = ev.fields
        self.pool, self.path = str(f.get("pool")), str(f.get("path", "?"))
        self.guid, self.size = f.get("guid"), int(f.get("size") or 0)
        self.max, self.bshift, self.final = f.get("max"), f.get("bshift"), bool(f.get("final"))
        self.lines.append(Sample(ev.ts, {c: int(f.get(c) or 0) for c in COUNTERS}))
        while len(self.lines) > 2 and ev.ts - self.lines[1].ts > KEEP_NS:
            self.lines.popleft()

    def at(self, t: int) -> dict | None:
        """Cumulative counters at t (held after the last line: a vdev with reads would have sent
        another), None before the first."""
        return value_at(self.lines, t, COUNTERS)[1]

    def window(self, t0: int, t1: int) -> dict | None:
        end = self.at(t1)
        if end is None:
            return None
        start = self.at(t0) or {c: 0 for c in COUNTERS}    # began inside: the probe counts from zero
        return {c: end[c] - start[c] for c in COUNTERS}

    def totals(self) -> dict:
        return dict(self.lines[-1].values) if self.lines else {c: 0 for c in COUNTERS}

    def stamped(self, t0: int, t1: int, cuts: list[int]) -> dict | None:
        """The counts of the lines stamped in [t0, t1), each since the line before it. A line
        comes at the first read a second after the last, so after an idle spell its counts go
        back to reads seconds old: one whose span crosses a cut (a tunable change) is left out."""
        out, prev = None, None
        for line in self.lines:
            if line.ts >= t1:
                break
            if line.ts >= t0:
                start = prev.ts if prev is not None else line.ts
                i = bisect_right(cuts, start)
                if i == len(cuts) or cuts[i] >= line.ts:
                    base = prev.values if prev is not None else dict.fromkeys(COUNTERS, 0)
                    out = add(out or {}, {c: line.values[c] - base[c] for c in COUNTERS})
            prev = line
        return out


def derive(t: dict) -> dict:
    """The figures a storage engineer reads, from summed counters (None where undefined)."""
    cached = t["hit_bytes"] + t["miss_bytes"]
    device = t["declined_bytes"] + t["fill_bytes"]
    return {
        **t,
        "hit_ratio": t["hits"] / (t["hits"] + t["misses"]) if t["hits"] + t["misses"] else None,
        # each miss reads a whole line: 64 KiB for an 8 KiB read is 8x
        "inflation": t["fill_bytes"] / t["miss_bytes"] if t["miss_bytes"] else None,
        # the cache's net effect on the reads it took: > 1 it costs device reads, < 1 it saves them
        "net": t["fill_bytes"] / cached if cached else None,
        # every offered read: bytes read from the device per byte asked for
        "device_bytes": device,
        "amplification": device / t["read_bytes"] if t["read_bytes"] else None,
    }


def add(a: dict, b: dict) -> dict:
    return {c: a.get(c, 0) + b.get(c, 0) for c in COUNTERS}


class VdevCacheModel:
    kinds = ("vc",)

    def __init__(self, prune: bool = False):
        self.prune = prune                             # live: forget idle vdevs after KEEP_NS
        self._pruned = 0
        self.vdevs: dict[tuple, Vdev] = {}             # (pid, vd, generation)
        self._gen: dict[tuple[int, str], int] = {}     # a vdev_t address freed and used again
        self.last_ts: int | None = None

    def feed(self, ev: Event) -> None:
        pid, vd = int(ev.get("pid", 0)), str(ev.get("vd"))
        self.last_ts = ev.ts if self.last_ts is None else max(self.last_ts, ev.ts)
        gen = self._gen.get((pid, vd), 0)
        vdev = self.vdevs.get((pid, vd, gen))
        if vdev is not None and vdev.final:
            gen = self._gen[(pid, vd)] = gen + 1
            vdev = None
        if vdev is None:
            vdev = self.vdevs[(pid, vd, gen)] = Vdev(pid, vd, gen)
        vdev.add(ev)
        # ztest makes new processes and vdevs all the time: forget the ones idle for KEEP_NS
        if self.prune and self.last_ts - self._pruned > PRUNE_NS:
            self._pruned, old = self.last_ts, self.last_ts - KEEP_NS
            self.vdevs = {k: v for k, v in self.vdevs.items() if v.lines[-1].ts >= old}
            known = {k[:2] for k in self.vdevs}
            self._gen = {k: g for k, g in self._gen.items() if k in known}

    def state(self, unavailable: str | None = None) -> tuple[str, str]:
        """(active | disabled | absent | unknown, one line saying why)."""
        if unavailable:
            return "absent", unavailable
        if not self.vdevs:
            return "unknown", "no leaf vdev read seen yet"
        sizes = sorted({v.size for v in self.vdevs.values() if v.size > 0})
        if sizes:
            v = max(self.vdevs.values(), key=lambda v: v.size)
            return "active", (f"zfs_vdev_cache_size={'/'.join(map(str, sizes))} per vdev, reads <= "
                              f"zfs_vdev_cache_max={v.max} B become {1 << (v.bshift or 16)} B reads "
                              f"(zfs_vdev_cache_bshift={v.bshift})")
        return "disabled", "zfs_vdev_cache_size=0: the cache code runs and declines every read; " + ENABLE_HINT

    def stamped_by_pool(self, t0: int, t1: int, cuts: list[int]) -> dict[str, dict]:
        """Summed counts per pool of the lines stamped in [t0, t1) (Vdev.stamped)."""
        out: dict[str, dict] = {}
        for v in self.vdevs.values():
            w = v.stamped(t0, t1, cuts)
            if w is not None:
                out[v.pool] = add(out.get(v.pool, {}), w)
        return out

    def by_pool(self, t0: int | None = None, t1: int | None = None) -> dict[str, dict]:
        """Summed counters per pool: over [t0, t1], or the whole capture without times."""
        out: dict[str, dict] = {}
        for v in self.vdevs.values():
            w = v.totals() if t0 is None else v.window(t0, t1)
            if w is not None:
                out[v.pool] = add(out.get(v.pool, {}), w)
        return out

    def rows(self) -> list[tuple[Vdev, dict]]:
        """Whole-capture counters per vdev incarnation, busiest first within a pool."""
        return sorted(((v, v.totals()) for v in self.vdevs.values()),
                      key=lambda item: (item[0].pool, -item[1]["reads"], item[0].path, item[0].pid, item[0].vd,
                                        item[0].gen))     # a total order: the same whatever came first
