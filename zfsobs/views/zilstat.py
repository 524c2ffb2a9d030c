"""`zfsobs zilstat`: Richard Elling's zilstat columns, per interval or per txg, from the same model.

N-Bytes  bytes used in the log blocks written (lwb_nused)      B-Bytes  their block sizes (lwb_sz)
ops      log blocks written (lwb writes)                       <=4kB 4-32kB >=32kB  ops by block size
*/s      per second over the interval (txg mode: over the txg's open time)
*-Max-Rate  the busiest whole second within the interval (txg mode: at least the txg's own rate)
Txg mode prints a txg a second after its sync: the ZIL probe's lines for it come from another
bpftrace and may arrive after the txg probe's line. Interval mode prints an interval a second after
it ends, for the same reason; a line later still (a loaded machine: CI's kernel lab lost 143 of 1549
log blocks so) counts in the next interval printed, so the columns add up to the run's totals.
"""
from __future__ import annotations

import sys
import time
from collections import Counter

from zfsobs import safe
from zfsobs.events import Event
from zfsobs.model import Model
from zfsobs.views.na import unavailable
from zfsobs.views.name_column import NameColumn
from zfsobs.views.units import wallclock

COLUMNS = ("N-Bytes", "N-Bytes/s", "N-Max-Rate", "B-Bytes", "B-Bytes/s", "B-Max-Rate", "ops", "<=4kB",
           "4-32kB", ">=32kB")
SIZES = ("lwb_le4k", "lwb_4to32k", "lwb_ge32k")
NA_COLUMNS = ("nused",) * 3 + ("size",) * 3 + ("lwbs",) + SIZES     # the field each column is made of
# A txg's (or an interval's) line waits this long past its time for the zil lines that belong to it:
# zil's come from its map sets' dumps, 0.5 to 1.5 s after the counts (up to 1.4 s seen under CI load,
# zfsobs/sources/set_dumps.py); the source's end prints whatever still waits
GRACE_NS = 3 * 10**9


class Zilstat:
    def __init__(self, model: Model, meta: dict, interval: float | None, count: int | None,
                 timestamps: bool = False, megabytes: bool = False, pool_column: bool = True,
                 header_every: int = 0, out=None):
        self.model = model
        self.meta = meta
        self.interval_ns = int(interval * 1e9) if interval else None    # None = one line per txg
        self.count = count
        self.timestamps = timestamps
        self.scale = 1e6 if megabytes else 1
        self.pool_column = pool_column      # txg mode, unless one pool was asked for
        self.header_every = header_every
        self.out = out or sys.stdout
        self.printed = 0
        self.start_ns: int | None = None
        self._since_header = None
        self.pools = NameColumn(12)     # txg mode's pool column
        self._last_final: dict[str, int] = {}
        self._pending: list[Event] = []
        self._taken: dict[str, int] = {}                 # per pool: flow entries taken so far
        self._waiting: list[tuple[int, Counter]] = []    # taken, not yet printed: (ts, deltas)

    @property
    def done(self) -> bool:
        return self.count is not None and self.printed >= self.count

    def header(self) -> str:
        names = [c.replace("Bytes", "MB") for c in COLUMNS] if self.scale != 1 else list(COLUMNS)
        lead = (["time"] if self.timestamps else []) + ([] if self.interval_ns else ["txg"])
        if not self.interval_ns and self.pool_column:
            lead.append("pool")
        return self._row(lead, names)

    def _pooled(self) -> bool:
        return not self.interval_ns and self.pool_column

    def _row(self, lead: list[str], values: list[str]) -> str:
        widths = [12] * len(lead)
        if self._pooled():
            widths[-1] = self.pools.width
        left = " ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(lead, widths)))
        right = " ".join(v.rjust(10 if i < 6 else 6) for i, v in enumerate(values))
        return (left + " " if left else "") + right

    def _emit(self, lead: list[str], nbytes: int, bbytes: int, seconds: float, nmax: float, bmax: float,
              counts: Counter) -> None:
        if self._pooled() and self.pools.widen([lead[-1]]):
            self._since_header = None       # the header again, over the wider column
        if self._since_header is None or (self.header_every and self._since_header >= self.header_every):
            self.out.write(self.header() + "\n")
            self._since_header = 0
        s = self.scale

        def num(v: float) -> str:
            return f"{v / s:.0f}" if s == 1 else f"{v / s:.3f}"

        per_s = (lambda v: v / seconds) if seconds > 0 else (lambda v: 0.0)
        values = [num(nbytes), num(per_s(nbytes)), num(max(nmax, per_s(nbytes) if seconds < 1 else 0)),
                  num(bbytes), num(per_s(bbytes)), num(max(bmax, per_s(bbytes) if seconds < 1 else 0)),
                  str(counts["lwbs"])] + [str(counts[k]) for k in SIZES]
        na = unavailable(self.model, "zil")       # kstat mode: no block sizes
        values = [("-" if col in na else v) for col, v in zip(NA_COLUMNS, values)]
        self.out.write(self._row(lead, values) + "\n")
        self.out.flush()
        self.printed += 1
        self._since_header += 1

    def on_tick(self, now_ns: int | None = None) -> bool:
        """Interval mode: print a line per elapsed interval. Returns False once `count` lines are out."""
        now = time.monotonic_ns() if now_ns is None else now_ns
        if self.interval_ns is None:
            while self._pending and not self.done and self._pending[0].ts <= now - GRACE_NS:
                self._txg_line(self._pending.pop(0))
            return not self.done
        if self.start_ns is None:
            self.start_ns = now
            return True
        self._take()
        while not self.done and now - self.start_ns >= self.interval_ns + GRACE_NS:
            end = self.start_ns + self.interval_ns
            self._interval(self.start_ns, end)
            self.start_ns = end
        return not self.done

    def _take(self) -> None:
        """The model's new flow entries (it appends them as lines arrive, whatever their ts)."""
        for pool, state in self.model.zil.pools.items():   # the pipeline already kept only -p pools
            new = state.flowed - self._taken.get(pool, 0)
            if new:
                self._waiting.extend(list(state.flow)[-min(new, len(state.flow)):])
                self._taken[pool] = state.flowed

    def _interval(self, start: int, end: int) -> None:
        counts: Counter = Counter()
        for ts, delta in self._waiting:
            if ts <= end:         # this interval's, and any that came after their own was printed
                counts.update(delta)
        self._waiting = [w for w in self._waiting if w[0] > end]
        nmax = bmax = 0.0
        for state in self.model.zil.pools.values():
            nmax = max(nmax, state.max_rate(start, end, "nused"))
            bmax = max(bmax, state.max_rate(start, end, "size"))
        lead = [wallclock(self.meta, end)] if self.timestamps else []
        self._emit(lead, counts["nused"], counts["size"], (end - start) / 1e9, nmax, bmax, counts)

    def finish(self) -> None:
        """The source ended: every txg it saw is complete."""
        while self._pending and not self.done:
            self._txg_line(self._pending.pop(0))

    def on_event(self, ev: Event) -> None:
        """Txg mode: a line per synced txg of the kept pools (zeros when the ZIL was idle)."""
        if self.interval_ns is None and ev.kind == "txg":
            self._pending.append(ev)

    def _txg_line(self, ev: Event) -> None:
        pool, txg = str(ev.fields["pool"]), int(ev.fields["txg"])
        state = self.model.zil.pools.get(pool)
        row = state.at_sync(int(ev.get("pid", 0)), txg, int(ev.get("start", ev.ts))) if state else None
        counts = Counter(row.counts) if row else Counter()
        open_ns = ev.get("open_ns") or ev.get("interval_ns") or 0
        start = self._last_final.get(pool, ev.ts - open_ns)
        end = row.last_ts if row else ev.ts
        self._last_final[pool] = end
        nmax = state.max_rate(start, end, "nused") if state else 0.0
        bmax = state.max_rate(start, end, "size") if state else 0.0
        lead = ([wallclock(self.meta, ev.get("start"))] if self.timestamps else []) + [str(txg)]
        if self.pool_column:
            lead.append(safe.text(pool))
        self._emit(lead, counts["nused"], counts["size"], open_ns / 1e9, nmax, bmax, counts)
