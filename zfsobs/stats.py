"""Small statistics shared by the model and the report."""
from __future__ import annotations

import math
from typing import Sequence


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100) of unsorted values; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary(values: Sequence[float]) -> dict:
    """count, mean, p50, p95, p99, max: the columns every latency table in zfsobs uses."""
    if not values:
        return {"count": 0, "mean": None, "p50": None, "p95": None, "p99": None, "max": None}
    ordered = sorted(values)
    n = len(ordered)

    def rank(p):
        return ordered[max(1, math.ceil(p / 100 * n)) - 1]

    return {"count": n, "mean": sum(ordered) / n, "p50": rank(50), "p95": rank(95),
            "p99": rank(99), "max": ordered[-1]}
