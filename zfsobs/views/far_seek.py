"""What a far seek in replay feeds of the way to its cut (zfsobs/views/replay.py): of the events
before it, only the ones the screen at the target still reads.

The target lies the model's whole history (horizon(): 10 min) past the cut, so nothing before the
cut is on the screen there itself; what is, is what the model carries across it:
- each counter series' last line (vq, vq_lat, vq_vdev, vc: cumulative, so the first line after the
  cut is told from it), of the vdev's latest incarnation: from its last final line on;
- each pool's txg and ZIL rows of the last rows_ns() (2 min) before its newest one (the panels' windows
  count back from a pool's newest row, however old: an exported pool shows its last minute);
- everything else (hellos, tunables, lost counts, pools): few, and fed whole.
The rest is skipped, counted as fed (the header's event count). Feeding the digests' picked lines
and the E records' rows whole was 5.1 s of a 8.9 s go-to into a day's capture (docs/performance.md)."""
from __future__ import annotations

from collections import deque
from typing import Iterator

from zfsobs.capture.digest import DIGESTED
from zfsobs.events import Event

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
        self._rows: dict[str, deque] = {}           # pool -> (n, event), its last rows_ns()
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
        elif kind in ROWS:
            self.throttle_seen |= kind == "txg_thr"
            rows = self._rows.setdefault(str(f.get("pool")), deque())
            rows.append((self.n, ev))
            while ev.ts - rows[0][1].ts > self._span:
                rows.popleft()
        else:
            self._other.append((self.n, ev))

    def kept(self) -> Iterator[Event]:
        picked = self._other + [p for keys in self._last.values() for p in keys.values()] + \
            [p for rows in self._rows.values() for p in rows]
        picked.sort(key=lambda p: p[0])
        return (ev for _, ev in picked)

    def skipped(self) -> int:
        return self.n - len(self._other) - sum(map(len, self._last.values())) - sum(map(len, self._rows.values()))
