"""What a far seek in replay feeds of the way to its cut (zfsobs/views/replay.py): of the events
before it, only the ones the screen at the target still reads.

The target lies the model's whole history (horizon(): 10 min) past the cut, so nothing before the
cut is on the screen there itself; what is, is what the model carries across it:
- each counter series' last line (vq, vq_lat, vq_vdev, vc: cumulative, so the first line after the
  cut is told from it), of the vdev's latest incarnation: from its last final line on;
- each pool's txg and ZIL rows of the last rows_ns() (2 min) before its newest one (the panels' windows
  count back from a pool's newest row, however old: an exported pool shows its last minute), with
  the txg_thr lines of those txgs, however long before their rows they came (bpftrace's come as a
  sync starts, the row as it ends), and the newest txg_thr lines whose row has not come yet;
- everything else (hellos, tunables, lost counts, pools): few, and fed whole.
The rest is skipped, counted as fed (the header's event count). Feeding the digests' picked lines
and the E records' rows whole was 5.1 s of a 8.9 s go-to into a day's capture (docs/performance.md)."""
from __future__ import annotations

from collections import deque
from typing import Iterator

from zfsobs.capture.digest import DIGESTED
from zfsobs.events import Event
from zfsobs.model.txg import PENDING

ROWS = frozenset(("txg", "txg_thr", "zil", "zil_itx", "zil_lat"))


def rows_ns() -> int:
    """The row history the txg and ZIL panels read, with room (read when used: the tests shrink them)."""
    from zfsobs.model import txg
    from zfsobs.views import zil_panel
    return 2 * max(txg.WINDOW_NS, zil_panel.WINDOW_NS)


class Prefix:
    """Takes the events before the cut in time order; kept() gives the ones to feed, in that order."""

    def __init__(self):
        self.n = 0
        self.first_ts: int | None = None
        self._other: list[tuple[int, Event]] = []
        self._last: dict[tuple, dict] = {}          # vdev -> key -> (n, event)
        self._rows: dict[str, deque] = {}           # pool -> [n, event, its txg_thr (n, event)s], its last rows_ns()
        self._thr: dict[tuple, list] = {}           # (pool, pid, txg) -> txg_thr (n, event)s before their row
        self._span = rows_ns()
        self.throttle_seen = False      # the txg model's `throttled`: whether the throttle is traced at all

    def add(self, ev: Event) -> None:
        self.n += 1
        if self.first_ts is None:
            self.first_ts = ev.ts
        kind, f = ev.kind, ev.fields
        if kind in DIGESTED:       # the counter lines
            vdev = ("vc" if kind == "vc" else "vq", f.get("pid"), f.get("vd"))
            if kind in ("vq_vdev", "vc") and f.get("final"):
                self._last[vdev] = {}       # an incarnation ends: the next starts from zero
            self._last.setdefault(vdev, {})[(kind, f.get("class"), f.get("kind"))] = (self.n, ev)
        elif kind == "txg_thr":
            self.throttle_seen = True
            key = (str(f.get("pool")), f.get("pid"), f.get("txg"))
            row = next((r for r in reversed(self._rows.get(key[0], ())) if r[1].kind == "txg" and
                        (r[1].fields.get("pid"), r[1].fields.get("txg")) == key[1:]), None)
            if row is not None:
                row[2].append((self.n, ev))     # its row came first (two probes): goes with it
            else:
                self._thr.setdefault(key, []).append((self.n, ev))
                while len(self._thr) > PENDING:     # as many as the txg model holds for rows to come
                    del self._thr[next(iter(self._thr))]
        elif kind in ROWS:
            pool = str(f.get("pool"))
            thr = self._thr.pop((pool, f.get("pid"), f.get("txg")), []) if kind == "txg" else []
            rows = self._rows.setdefault(pool, deque())
            rows.append([self.n, ev, thr])
            while ev.ts - rows[0][1].ts > self._span:
                rows.popleft()
        else:
            self._other.append((self.n, ev))

    def kept(self) -> Iterator[Event]:
        picked = self._other + [p for keys in self._last.values() for p in keys.values()] + \
            [p for thr in self._thr.values() for p in thr]
        for rows in self._rows.values():
            for n, ev, thr in rows:
                picked += thr
                picked.append((n, ev))
        picked.sort(key=lambda p: p[0])
        return (ev for _, ev in picked)

    def skipped(self) -> int:
        rows = sum(1 + len(thr) for rows in self._rows.values() for _, _, thr in rows)
        return self.n - len(self._other) - sum(map(len, self._last.values())) - rows - \
            sum(map(len, self._thr.values()))
