"""Fields a source cannot give (kstat mode: the hello lines' `na`), and the figures made from them:
every view shows them as unavailable ("-", null in JSON), never as the zero the model counts."""
from __future__ import annotations

from zfsobs.model import Model
from zfsobs.model.zil import TX_NAMES

DERIVED = {
    "lat_ns": ("lat_mean_ns", "lat_p50_ns", "lat_p99_ns", "lat_max_ns", "lat_hist"),
    "tx": tuple(f"tx_{n}" for n in TX_NAMES),
    "wait_ns": ("wait_mean_ns",),
    "dev_ns": ("dev_mean_ns",),
    "vq_lat": ("wait_p50_ns", "wait_p99_ns", "dev_p50_ns", "dev_p99_ns"),
    "miss_bytes": ("inflation", "net"),
    "hit_bytes": ("net",),
    "read_bytes": ("amplification",),
    "declined_bytes": ("device_bytes",),
}


def unavailable(model: Model, probe: str) -> frozenset:
    na = model.na.get(probe, frozenset())
    return na.union(*(DERIVED.get(f, ()) for f in na)) if na else na


def blank(d: dict, na: frozenset) -> dict:
    """`d` with every unavailable field set to None."""
    return {k: None if k in na else v for k, v in d.items()} if na else d


def dash(value) -> str:
    return "-" if value is None else str(value)
