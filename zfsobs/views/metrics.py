"""How the sampled metrics (zfsobs/model/samples.py) are named and formatted in every view:
labels in ZFS terms, values with their units (ms for times, B/KiB/MiB for bytes), ratios."""
from __future__ import annotations

from zfsobs.views.units import ms, size

LABELS = {
    "sync_ns": "sync time", "interval_ns": "interval", "dirty_bytes": "dirty data",
    "dirty_pct": "dirty % of max", "delays": "delayed txs/txg", "delay_ns": "delay time/txg",
    "commits": "commits/txg", "nused_bytes": "N-Bytes/txg", "size_bytes": "B-Bytes/txg",
    "lat_mean_ns": "commit lat mean", "pend_mean": "pending mean", "act_mean": "active mean",
    "act_max": "active max", "max_active": "max_active", "wait_mean_ns": "wait/IO mean",
    "hit_ratio": "hit ratio", "inflation": "inflation", "amplification": "device/asked",
}


def label(metric: str) -> str:
    """'vq.async_write.act_mean' -> 'vq async_write active mean'."""
    *group, name = metric.split(".")
    return " ".join(group + [LABELS.get(name, name)])


def value(metric: str, v: float | None) -> str:
    if v is None:
        return "-"
    if metric.endswith("_ns"):
        return f"{ms(v, 3)} ms"
    if metric.endswith("_bytes"):
        return size(v)
    if metric.endswith("_pct"):
        return f"{v:.0f}%"
    if metric.endswith("ratio"):
        return f"{100 * v:.0f}%"
    if metric.endswith(("inflation", "amplification")):
        return f"{v:.2f}x"
    return str(int(v)) if float(v).is_integer() else f"{v:.2f}"


def ratio(r: float | None) -> str:
    """after/before: two decimals from 0.1 on, two significant digits below (0.0011x is not 0.00x)."""
    if r is None:
        return "-"
    return f"{r:.1f}x" if r >= 100 else f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x"
