"""`zfsobs doctor`'s modes: whether kstat mode works here (no root needed), what each mode shows,
and which one `zfsobs top` will use (--source auto)."""
from __future__ import annotations

from zfsobs.sources import kstats

SHOWS = ("kstat mode shows: every synced txg exactly as ZFS timed it (sync, open, quiesce, wait, "
         "dirty); ZIL commits, log blocks and their bytes (N-Bytes), copied/needcopy/indirect; queue "
         "depth per leaf vdev and class, sampled 5x a second (zpool iostat -q); vdev_cache hits and "
         "misses (OpenZFS 2.0/2.1: 2.2 removed the vdev cache)")
LACKS = ("kstat mode lacks (shown as '-'): commit latency, itx counts and types, log block sizes "
         "(B-Bytes, size classes), I/Os enqueued/merged/done and queue wait/device times, "
         "vdev_cache bytes asked and inflation; global kstats go to pool '*' when several pools are imported")


def rows(traceable: bool) -> tuple[list[tuple[str, str, str]], bool]:
    """(status, what, detail) rows, and whether kstat mode works here."""
    out = []
    why = kstats.unusable()
    works = not why
    if works and not kstats.zpool():
        out.append(("warn", "kstat mode: queue depth", "no zpool command: no vdev queue panel in kstat mode"))
    out.append(("ok" if works else "warn", "kstat mode (no root)", "works here" if works else why))
    if works:
        out.append(("ok", "kstat mode: shows", SHOWS))
        out.append(("ok", "kstat mode: lacks", LACKS))
    mode = ("trace mode (bpftrace): every field" if traceable else
            "kstat mode: tracing cannot run here (above)" if works else "none")
    out.append(("ok" if traceable or works else "FAIL", "zfsobs top would use", mode))
    return out, works
