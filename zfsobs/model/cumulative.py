"""Cumulative counters sent as lines now and then: their value at any time. Shared by the models
whose probes send per-vdev cumulative lines (vdev queue, vdev_cache)."""
from __future__ import annotations

from bisect import bisect_right


def value_at(lines, t: int, names) -> tuple[int, dict | None]:
    """(index of the latest line at or before t, the counters `names` at t): interpolated between
    two lines (what happened between them is only known in sum), the last line's after it;
    (-1, None) before the first. `lines` are in time order, each with .ts and .values."""
    i = bisect_right(lines, t, key=lambda ln: ln.ts) - 1
    if i < 0:
        return i, None
    ln = lines[i]
    if i + 1 == len(lines):
        return i, dict(ln.values)
    nxt = lines[i + 1]
    frac = (t - ln.ts) / (nxt.ts - ln.ts) if nxt.ts > ln.ts else 0.0
    return i, {c: ln.values[c] + (nxt.values[c] - ln.values[c]) * frac for c in names}
