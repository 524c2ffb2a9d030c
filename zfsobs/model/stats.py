"""Small statistics shared by the model and the report."""
from __future__ import annotations

import math
from typing import Sequence


def _rank(ordered: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted, non-empty values."""
    return ordered[min(max(1, math.ceil(p / 100 * len(ordered))), len(ordered)) - 1]


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100) of unsorted values; None for no values."""
    return _rank(sorted(values), p) if values else None


def summary(values: Sequence[float]) -> dict:
    """count, mean, p50, p95, p99, max: the columns every latency table in zfsobs uses."""
    if not values:
        return {"count": 0, "mean": None, "p50": None, "p95": None, "p99": None, "max": None}
    ordered = sorted(values)
    return {"count": len(ordered), "mean": sum(ordered) / len(ordered), "p50": _rank(ordered, 50),
            "p95": _rank(ordered, 95), "p99": _rank(ordered, 99), "max": ordered[-1]}
