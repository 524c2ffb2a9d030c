"""The model: per-metric state fed by events; knows nothing of screens or files.

Every view (live, replay, report) reads one of these; only how events arrive differs.
"""
from __future__ import annotations

from collections import Counter, deque

from zfsobs.events import Event
from zfsobs.model.counters import RunCounters
from zfsobs.model.samples import KEEP_NS, SampleModel
from zfsobs.model.tuning import TuningModel
from zfsobs.model.txg import KEEP, TxgModel
from zfsobs.model.vdev_cache import VdevCacheModel
from zfsobs.model.vdev_queue import VdevQueueModel
from zfsobs.model.zil import ZilModel

RATE_WINDOW_NS = 5 * 10**9


class Model:
    def __init__(self, keep: int | None = KEEP, samples: bool = True, counters: bool = True, ledger=None):
        # with a ledger (a report's), txg and ZIL rows past the live view's KEEP go to it, not memory
        rows = keep if ledger is None else KEEP
        self.txg = TxgModel(rows, ledger and ledger.txg)
        self.zil = ZilModel(rows, ledger and ledger.zil)
        self.ledger = ledger
        self.vq = VdevQueueModel(prune=keep is not None)
        self.vc = VdevCacheModel(prune=keep is not None)
        self.probes: dict[str, str] = {}      # probe name -> target kind, from hello events
        self.na: dict[str, frozenset] = {}    # probe name -> fields its source cannot give (kstat mode)
        self.tuning = TuningModel()
        self.counters = RunCounters()      # what only grows, for Prometheus
        self.samples = SampleModel(self.zil, self.vq, self.vc, self.tuning, self.probes,
                                   None if keep is None else KEEP_NS, self.txg)
        self._routes: dict[str, list] = {}
        # samples last: it reads what the other parts made of the same event
        # samples=False: a plain report reads no samples, and binning them is a third of its time
        # counters=False: a report reads none of the run totals (Prometheus's), a third of its model time
        parts = (self.txg, self.zil, self.vq, self.vc, self.tuning) + ((self.counters,) if counters else ())
        for part in parts + ((self.samples,) if samples else ()):
            for kind in part.kinds:
                self._routes.setdefault(kind, []).append(part)
        self.lost = 0
        self.lost_by_probe: Counter = Counter()   # bpftrace's perf buffer overflowed: lines never seen
        self.events = 0
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self._recent: deque[int] = deque()

    def feed(self, ev: Event) -> None:
        self.events += 1
        if self.first_ts is None:
            self.first_ts = ev.ts
        self.last_ts = ev.ts if self.last_ts is None else max(self.last_ts, ev.ts)
        self._recent.append(ev.ts)
        while self._recent and self.last_ts - self._recent[0] > RATE_WINDOW_NS:
            self._recent.popleft()
        if ev.kind == "hello":
            self.probes[str(ev.get("probe"))] = str(ev.get("target", ""))
            if ev.get("na"):
                self.na[str(ev.get("probe"))] = frozenset(str(ev.get("na")).split(","))
        elif ev.kind == "lost":
            self.lost += int(ev.get("count", 0))
            self.lost_by_probe[str(ev.get("probe", "?"))] += int(ev.get("count", 0))
        for part in self._routes.get(ev.kind, ()):
            part.feed(ev)

    def events_per_second(self, now_ns: int | None = None) -> float:
        """Event rate over the last few seconds before `now_ns` (default: the last event)."""
        now = self.last_ts if now_ns is None else now_ns
        if now is None:
            return 0.0
        recent = sum(1 for ts in self._recent if now - ts <= RATE_WINDOW_NS)
        return recent / (RATE_WINDOW_NS / 1e9)
