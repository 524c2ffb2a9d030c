"""Line mode: one line per txg when stdout is not a terminal (like zilstat / arcstat)."""
from __future__ import annotations

import sys

from zfsobs import safe
from zfsobs.events import Event
from zfsobs.views.name_column import NameColumn
from zfsobs.views.units import wallclock

COLUMNS = ("time", "pool", "txg", "sync_ms", "interval_ms", "dirty_MiB", "open_ms", "quiesce_ms",
           "wait_ms")


class TxgLines:
    def __init__(self, meta: dict, out=None, sep: str | None = None):
        self.meta = meta
        self.out = out or sys.stdout
        self.sep = sep
        self._header = False
        self.pools = NameColumn(12)

    def _fmt(self, values) -> str:
        if self.sep is not None:
            return self.sep.join(values)
        widths = (12, self.pools.width, 10, 9, 12, 10, 9, 11, 9)
        return " ".join(v.rjust(w) if i > 1 else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths)))

    def __call__(self, ev: Event) -> None:
        if ev.kind != "txg":
            return
        f = ev.fields
        pool = safe.text(f["pool"])
        if self.sep is None and self.pools.widen([pool]):
            self._header = False        # the header again, over the wider column
        if not self._header:
            self.out.write(self._fmt(COLUMNS) + "\n")
            self._header = True

        def num(name, scale, digits):
            v = f.get(name)
            return "-" if v is None else f"{v / scale:.{digits}f}"

        self.out.write(self._fmt((wallclock(self.meta, f.get("start")), pool, str(f["txg"]),
                                  num("sync_ns", 1e6, 3), num("interval_ns", 1e6, 3),
                                  num("dirty", 1048576, 2), num("open_ns", 1e6, 3),
                                  num("quiesce_ns", 1e6, 3), num("wait_ns", 1e6, 3))) + "\n")
        self.out.flush()
