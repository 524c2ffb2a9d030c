"""What each probe that counts in map sets makes of its counts (zfsobs/sources/set_dumps.py adds
the dumps up; docs/events.md, "Map sets"): the lines of one key, and which of the probe's own lines
close a key or tell what its lines carry besides counts (a pool's name, a vdev's path, tunables).

A writer gets a key's counts as `Counts` and returns its lines. zil's and vdev_cache's lines are
cumulative (a key's later line replaces the earlier); txg_thr's add up (each carries what its
txg's earlier lines did not: the D twin's lines add up the same way, docs/events.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from zfsobs.events import format_line
from zfsobs.fields import (THROTTLE, THROTTLE_BY_TIME, VDEV_CACHE, VDEV_CACHE_COUNTS, ZIL, ZIL_COUNTS,
                           ZIL_ITX, ZIL_LAT, ZIL_LAT_SEGMENT, Kind)


@dataclass(frozen=True)
class Counts:
    key: tuple              # (pid, k1, k2)
    ts: int
    final: int              # 0 open, 1 closed (covered by the dumps), 2 again after a late count
    values: dict            # field -> sum or maximum so far
    before: dict            # field -> what the key's earlier lines carried ({} none)
    notes: Callable[[str, tuple], dict]     # a note line's fields for a key ({} none)


@dataclass(frozen=True)
class Stream:
    kind: Kind
    close: str                          # the probe's line that ends a key's counting (a note too)
    notes: dict                         # the probe's other lines -> the key fields they are kept by
    open_lines: bool                    # an open key's lines at most once a second (else at the stop)
    late_lines: bool                    # a count after a key's close makes its lines again (else: lost)
    lines: dict                         # the lines it makes -> their fields (the D twins' are checked)
    write: Callable[[Counts], list[str]]
    # the note that names a key's pool (set_pool, at the pool's first close; a pool made later at
    # the same address replaces it at its own): an open key's lines wait for it; None: no such note
    named: str | None = None


_TXG_HEAD = ("pool", "pid", "txg", "cpu", "final")


def _zil(c: Counts) -> list[str]:
    (pid, spa, txg), v = c.key, c.values
    head = {"pool": c.notes("set_pool", (pid, spa)).get("pool", "?"), "pid": pid, "txg": txg, "cpu": 0,
            "final": c.final}
    out = [format_line("zil", c.ts, {**head, "commits": v["commits"], "lat_ns": v["lat_ns"],
                                     "lat_max_ns": v["lat_max_ns"], **{n: v[n] for n in ZIL_COUNTS}}),
           format_line("zil_itx", c.ts, {**head, **{n: v[n] for n in ZIL_ITX}})]
    for seg in range(len(ZIL_LAT) // ZIL_LAT_SEGMENT if v["commits"] else 0):
        names = ZIL_LAT[seg * ZIL_LAT_SEGMENT:(seg + 1) * ZIL_LAT_SEGMENT]
        out.append(format_line("zil_lat", c.ts, {**head, "seg": seg, **{f"b{i}": v[n] for i, n in enumerate(names)}}))
    return out


_THR_SUMS = ("delays", "delay_ns", "waits", "wait_ns") + THROTTLE_BY_TIME
_THR_TUNABLES = ("dirty_data_max", "delay_min_pct", "delay_scale")


def _throttle(c: Counts) -> list[str]:
    (pid, spa, txg), v = c.key, c.values
    d = {n: v[n] - c.before.get(n, 0) for n in _THR_SUMS}
    tun = c.notes("set_close", c.key)
    return [format_line("txg_thr", c.ts, {
        "pool": c.notes("set_pool", (pid, spa)).get("pool", "?"), "pid": pid, "txg": txg,
        "late": int(c.final == 2), "dirty_max": v["dirty_max"], **{n: tun.get(n, -1) for n in _THR_TUNABLES},
        "delays": d["delays"], "delay_ns": d["delay_ns"], "delay_max_ns": v["delay_max_ns"],
        **{n: d[n] for n in THROTTLE_BY_TIME}, "waits": d["waits"], "wait_ns": d["wait_ns"]})]


def _vdev_cache(c: Counts) -> list[str]:
    (pid, vd, gen), ident = c.key, c.notes("vc_id", c.key)
    return [format_line("vc", c.ts, {
        "pool": ident.get("pool", "?"), "pid": pid, "vd": hex(vd), "final": int(c.final > 0),
        **{n: c.values[n] for n in VDEV_CACHE_COUNTS},
        **{n: ident.get(n, -1) for n in ("size", "max", "bshift")},
        "guid": ident.get("guid", 0), "path": ident.get("path", "?")})]


STREAMS = {
    "zil": Stream(ZIL, "set_close", {"set_pool": ("spa",)}, True, True,
                  {"zil": _TXG_HEAD + ("commits", "lat_ns", "lat_max_ns") + ZIL_COUNTS,
                   "zil_itx": _TXG_HEAD + ZIL_ITX,
                   "zil_lat": _TXG_HEAD + ("seg",) + tuple(f"b{i}" for i in range(ZIL_LAT_SEGMENT))}, _zil,
                  "set_pool"),
    "throttle": Stream(THROTTLE, "set_close", {"set_pool": ("spa",)}, False, True,
                       {"txg_thr": ("pool", "pid", "txg", "late", "dirty_max") + _THR_TUNABLES
                        + ("delays", "delay_ns", "delay_max_ns") + THROTTLE_BY_TIME + ("waits", "wait_ns")},
                       _throttle, "set_pool"),
    # a vdev is freed after its last read is done: a count after its vc_close cannot come, and would
    # be a `lost` one (cause=late), never a second last line
    "vdev_cache": Stream(VDEV_CACHE, "vc_close", {"vc_id": ("vd", "gen")}, True, False,
                         {"vc": ("pool", "pid", "vd", "final") + VDEV_CACHE_COUNTS
                          + ("size", "max", "bshift", "guid", "path")}, _vdev_cache),
}
# every line of a set probe's own that SetDumps uses up (none reaches the stream or a capture)
OWN = frozenset({"set_dump", "set_dump_end"} | {s.close for s in STREAMS.values()}
                | {n for s in STREAMS.values() for n in s.notes})
