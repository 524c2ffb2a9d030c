"""The counter fields of the probes that count in map sets (probes/linux/sets.btm): one table per
probe, from which the renderer makes the slot numbers the probes write (zfsobs/targets/sets.py),
zfsobs/sources/set_dumps.py reads the dumps back, and the models and D scripts are checked
(tests/test_fields.py). A slot is a field's index in its kind's `sums` (a sum()) or `tops` (a max());
no slot number is written anywhere else."""
from __future__ import annotations

from dataclasses import dataclass

ZIL_LAT_BUCKETS = 50        # commit latency: b0 < 1.024 us, then two per power of two (docs/zil.md)
ZIL_LAT_SEGMENT = 25        # buckets per zil_lat line
ZIL_ITX_TYPES = 25          # record types tx0..tx24 (tx0: TX_COMMIT), then txother
THROTTLE_BINS = 6           # throttled waits by time: < 10 us, < 100 us, ... >= 100 ms


@dataclass(frozen=True)
class Kind:
    probe: str
    keys: tuple[str, str]       # what the two keys after the process are
    sums: tuple[str, ...]       # sum() slots, in order
    tops: tuple[str, ...]       # max() slots, in order
    # fields of the lines that no probe counts: each the sum of counted (or earlier derived) ones,
    # a part named "-f" taken away (a count the probe would only repeat costs a map update per event)
    derived: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def values(self, sums: list[int], tops: list[int]) -> dict[str, int]:
        """Every field of a key: its slots' values and the derived sums."""
        return self.derive({**dict(zip(self.sums, sums)), **dict(zip(self.tops, tops))})

    def derive(self, v: dict[str, int]) -> dict[str, int]:
        """`v` (every counted field of a key by name) with the derived fields added."""
        for name, parts in self.derived:
            v[name] = sum(-v[p[1:]] if p[0] == "-" else v[p] for p in parts)
        return v

    def slot(self, name: str) -> tuple[str, int]:
        """('n', i) for a sum, ('x', i) for a maximum."""
        if name in self.sums:
            return "n", self.sums.index(name)
        if name in self.tops:
            return "x", self.tops.index(name)
        raise KeyError(f"{self.probe}: no counter field {name!r}")


ZIL_COUNTS = ("itxs", "itx_bytes", "writes", "write_bytes", "copied", "copied_bytes", "needcopy",
              "needcopy_bytes", "indirect", "indirect_bytes", "lwbs", "nused", "size", "lwb_le4k",
              "lwb_4to32k", "lwb_ge32k")
ZIL_ITX = tuple(f"tx{i}" for i in range(ZIL_ITX_TYPES)) + ("txother",)
ZIL_LAT = tuple(f"lat_b{b}" for b in range(ZIL_LAT_BUCKETS))
# a commit is in one latency bucket, a TX_WRITE (tx9) or TX_WRITE2 (tx20) in one write state, a log
# record of a type != 0 (TX_COMMIT) is an itx, a log block in one size bin
ZIL_DERIVED = (("commits", ZIL_LAT), ("tx9", ("copied", "needcopy", "indirect", "-tx20")), ("itxs", ZIL_ITX[1:]),
               ("writes", ("copied", "needcopy", "indirect")),
               ("write_bytes", ("copied_bytes", "needcopy_bytes", "indirect_bytes")),
               ("lwbs", ("lwb_le4k", "lwb_4to32k", "lwb_ge32k")))
ZIL = Kind("zil", ("spa", "txg"),
           tuple(f for f in ("commits", "lat_ns") + ZIL_COUNTS if f not in dict(ZIL_DERIVED))
           # tx0 + type is a record type's slot: tx9's stays, unwritten
           + tuple("unused_tx9" if f == "tx9" else f for f in ZIL_ITX) + ZIL_LAT,
           ("lat_max_ns",), ZIL_DERIVED)

THROTTLE_BY_TIME = tuple(f"d{i}" for i in range(THROTTLE_BINS))
THROTTLE = Kind("throttle", ("spa", "txg"), ("delays", "delay_ns", "waits", "wait_ns") + THROTTLE_BY_TIME,
                ("delay_max_ns", "dirty_max"))

VDEV_CACHE_COUNTS = ("reads", "read_bytes", "hits", "hit_bytes", "misses", "miss_bytes", "fill_bytes",
                     "declined", "declined_bytes")
VDEV_CACHE = Kind("vdev_cache", ("vd", "gen"), VDEV_CACHE_COUNTS, ())

# vdev_queue keeps its own map sets, SETS of them (probes/linux/vdev_queue_sets.btm,
# zfsobs/sources/vq_dumps.py), and takes its slots from here by name (SLOT(name) in the script): its
# counts per (vdev, generation << 4 | class), the depth bookkeeping, and the two latency histograms,
# at the slots the D twin also writes
VQ_BUCKETS = 24             # b0 < 2.048 us, bN = [1.024 us * 2^N, ...), b23 >= 8.6 s
VQ_COUNTS = ("enq", "enq_bytes", "issued", "merged", "aggs", "done", "done_bytes", "wait_ns", "dev_ns",
             "untracked", "untracked_act", "unseen")
VQ_DEPTH = ("pend", "act", "pend_us", "act_us", "pend_gone_ns", "act_gone_ns")
VQ_WAITS = tuple(f"wait_b{b}" for b in range(VQ_BUCKETS))
VQ_DEVS = tuple(f"dev_b{b}" for b in range(VQ_BUCKETS))
# every wait followed ends in the wait histogram, issued or merged, and an I/O entered is pending
# until then (retired ones leave enq too); every completion followed is in the device histogram,
# and an I/O issued or aggregated is active until it completes or is retired (untracked_act: not
# followed from its issue, or retired)
VQ_DERIVED = (("issued", VQ_WAITS + ("-merged",)), ("done", VQ_DEVS),
              ("pend", ("enq",) + tuple("-" + w for w in VQ_WAITS)),
              ("act", ("issued", "aggs", "-untracked_act", "-done")))


def _unused(first: int, end: int) -> tuple[str, ...]:
    return tuple(f"unused{i}" for i in range(first, end))


_VQ_COUNTED = tuple(f for f in VQ_COUNTS + VQ_DEPTH if f not in dict(VQ_DERIVED))
VDEV_QUEUE = Kind("vdev_queue", ("vd", "gc"), _VQ_COUNTED + _unused(len(_VQ_COUNTED), 32) + VQ_WAITS
                  + _unused(56, 64) + VQ_DEVS, ("pend_max", "act_max"), VQ_DERIVED)

# the probes whose slots come from here
KINDS = {k.probe: k for k in (ZIL, THROTTLE, VDEV_CACHE, VDEV_QUEUE)}
