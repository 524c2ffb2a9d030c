"""`zfsobs vqstat`: `zpool iostat -q` columns (pend and activ per queue), but time-weighted over
each interval instead of one instant sampled at its end (which swings with the interval,
openzfs#7694). One line per pool, the sum over its leaf vdevs; -v adds one per leaf vdev.
--max prints the highest depth seen in the interval instead of the mean (pool lines: the largest
of its vdevs).
"""
from __future__ import annotations

import os
import sys
import time
from collections import defaultdict

from zfsobs import safe
from zfsobs.model import Model
from zfsobs.views.name_column import NameColumn
from zfsobs.views.units import wallclock

GRACE_NS = 10**9      # an interval is printed once every busy vdev has sent a line after it

# zpool iostat -q's queues (2.2+ adds rebuildq_write), by vdev_queue class number
QUEUES = (("syncq_read", 0), ("syncq_write", 1), ("asyncq_read", 2), ("asyncq_write", 3),
          ("scrubq_read", 4), ("trimq_write", 7), ("rebuildq_write", 8))


class Vqstat:
    def __init__(self, model: Model, meta: dict, interval: float, count: int | None,
                 verbose: bool = False, peak: bool = False, timestamps: bool = False, out=None):
        self.model = model
        self.meta = meta
        self.interval_ns = int(interval * 1e9)
        self.count = count
        self.verbose = verbose
        self.peak = peak
        self.timestamps = timestamps
        self.out = out or sys.stdout
        self.printed = 0
        self.names = NameColumn(24)     # the pool/vdev column
        self.start_ns: int | None = None

    @property
    def done(self) -> bool:
        return self.count is not None and self.printed >= self.count

    def header(self) -> str:
        top = " ".join(name.center(13) for name, _ in QUEUES)
        sub = " ".join(f"{'pend':>6} {'activ':>6}" for _ in QUEUES)
        lead = ("time".ljust(13) if self.timestamps else "") + "pool/vdev".ljust(self.names.width)
        return f"{'':{len(lead)}} {top}\n{lead} {sub}"

    def on_tick(self, now_ns: int | None = None) -> bool:
        now = time.monotonic_ns() if now_ns is None else now_ns
        if self.start_ns is None:
            self.start_ns = now
            return True
        while not self.done and now - self.start_ns >= self.interval_ns + GRACE_NS:
            end = self.start_ns + self.interval_ns
            self.interval(self.start_ns, end)
            self.start_ns = end
        return not self.done

    def interval(self, start: int, end: int) -> None:
        rows = self.model.vq.window((end - start) / 1e9, end)
        pools: dict[str, dict] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
        vdevs: dict[tuple, dict] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
        for vdev, s, w in rows:
            pend, act = (w["pend_max"], w["act_max"]) if self.peak else (w["pend_mean"], w["act_mean"])
            cell = vdevs[(vdev.pool, vdev.path, vdev.pid)][s.cls]
            cell[0] += max(0.0, pend)
            cell[1] += max(0.0, act)
        for (pool, _, _), cells in vdevs.items():
            for cls, (pend, act) in cells.items():
                total = pools[pool][cls]
                if self.peak:
                    total[0], total[1] = max(total[0], pend), max(total[1], act)
                else:
                    total[0] += pend
                    total[1] += act
        stamp = wallclock(self.meta, end).ljust(13) if self.timestamps else ""
        # pools with live vdevs print even when idle (zeros), as zpool iostat does
        live = {v.pool for v in self.model.vq.vdevs.values() if not v.final and v.pool != "?"}
        out = []
        for pool in sorted(set(pools) | live) or ["-"]:
            out.append((pool, pools.get(pool, {})))
            if self.verbose:
                for key in sorted(k for k in vdevs if k[0] == pool):
                    out.append(("  " + os.path.basename(key[1]) + (f" [{key[2]}]" if key[2] else ""), vdevs[key]))
        # the header over each -v block, and again over a wider name column
        if self.names.widen([safe.text(name) for name, _ in out]) or self.printed == 0 or self.verbose:
            self.out.write(self.header() + "\n")
        for name, cells in out:
            self.out.write(stamp + self._line(name, cells) + "\n")
        self.out.flush()
        self.printed += 1

    def _line(self, name: str, cells: dict) -> str:
        fmt = (lambda v: f"{v:6.0f}") if self.peak else (lambda v: f"{v:6.2f}")
        values = " ".join(f"{fmt(cells[c][0])} {fmt(cells[c][1])}" if c in cells else f"{0:6} {0:6}"
                          for _, c in QUEUES)
        return f"{safe.text(name):<{self.names.width}} {values}"
