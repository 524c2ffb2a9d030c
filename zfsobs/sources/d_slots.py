"""The D scripts' totals, as the lines every other probe prints (docs/illumos.md, "Totals").

DTrace 2.0 (Oracle's, on Linux) loses what a probe adds to an aggregation between the consumer's
snapshot and trunc(): zil.d and throttle.d emptied theirs at each flush and came out 1-7 % low
(issue 27). So they never empty one. They count per (pool, spa_t, txg & 7), a slot a txg reuses
eight txgs later, and every flush prints each slot's totals since the script started as a `_c`
line (`zil_c`, `zil_itx_c`, `zil_lat_c`, `txg_thr_c`) with the txg the slot holds (its largest).
This turns each slot's rise since the previous flush into the line the bpftrace twin's reader
expects for that txg (`zil`, `zil_itx`, `zil_lat`, `txg_thr`, docs/events.md), whose parts add up.

A per-txg maximum cannot be a plain max() across reuses: the script tags it with the slot's round
(txg >> 3, 24 bits) above bit 40, so the newest round's is the largest, and a maximum of an older
round counts as none yet (0). A slot moves on only eight txgs later, long after its txg synced and
its last counts were flushed (a flush runs as every txg syncs), so a rise is all the current txg's.
"""
from __future__ import annotations

from zfsobs.events import format_line, key_values

TAG_SHIFT = 40
VALUE_MASK = (1 << TAG_SHIFT) - 1
ROUND_MASK = (1 << 24) - 1
# D's kind -> (the line it becomes, its per-txg maxima, tagged; whether it carries cpu and final)
KINDS = {
    "zil_c": ("zil", frozenset({"lat_max_ns"}), True),
    "zil_itx_c": ("zil_itx", frozenset(), True),
    "zil_lat_c": ("zil_lat", frozenset(), True),
    "txg_thr_c": ("txg_thr", frozenset({"dirty_max", "dirty_data_max", "delay_min_pct", "delay_scale",
                                        "delay_max_ns"}), False),
}
SLOT_KEYS = ("spa", "slot")      # which slot a line is of, with the kind, pool and seg


def wanted(text: str) -> bool:
    """Whether a script prints slot totals (so its lines go through DSlots)."""
    return any(f"zfsobs 1 {kind} " in text for kind in KINDS)


def untag(value: int, txg: int) -> int:
    """A tagged maximum as txg's: its value if it is of txg's round, else 0 (none yet)."""
    return value & VALUE_MASK if value >> TAG_SHIFT == (txg >> 3) & ROUND_MASK else 0


class DSlots:
    def __init__(self):
        self._last: dict[tuple, tuple[int, dict[str, int]]] = {}    # slot -> (ts, its totals)

    def feed(self, line: str) -> list[str]:
        parts = line.split()
        if len(parts) < 5 or parts[0] != "zfsobs" or parts[2] not in KINDS:
            return [line] if line.strip() else []
        kind, maxima, per_cpu = KINDS[parts[2]]
        try:
            ts = int(parts[3])
            fields = key_values(parts, strict=True)
            txg = int(fields["txg"])
            key = (parts[2], fields["pool"], fields.get("seg"), *(fields[k] for k in SLOT_KEYS))
            totals = {k: int(v) for k, v in fields.items() if k not in ("pool", "txg", "seg", *SLOT_KEYS)}
        except (KeyError, ValueError):
            return [line]           # not a slot line after all: the parser counts it malformed
        last_ts, last = self._last.get(key, (None, {}))
        self._last[key] = ts, totals
        if ts == last_ts:
            return []               # nothing happened in this slot since the previous flush
        out = {"pool": fields["pool"], "pid": 0, "txg": txg}
        if per_cpu:
            out.update(cpu=ts, final=0)     # its own time: a unique part of the row (docs/events.md)
        if "seg" in fields:
            out["seg"] = fields["seg"]
        for name, value in totals.items():
            out[name] = untag(value, txg) if name in maxima else value - last.get(name, 0)
        return [format_line(kind, ts, out)]


DUMP_TAG = 32


def dump_totals(text: str) -> bool:
    """Whether a script's vq_dump holds totals since the start (probes/dtrace-openzfs/vdev_queue.d)."""
    return "zfsobs 1 vq_dump " in text and " round=" in text


class DumpTotals:
    """The D vdev queue script's dumps of totals, as dumps of what moved since the previous one
    (what bpftrace's map sets hold, zfsobs/sources/vq_dumps.py). A maximum counts in the dump of
    its round, the next one's (a probe wrote it as the round turned), and any earlier one dtrace
    printed late (its consumer snapshots when it gets to the record, which under load can be
    rounds after the tick). A later round's write hides an earlier round's larger maximum: when
    dtrace lags by more than a round, a queue's maximum can come out low (docs/illumos.md)."""

    def __init__(self):
        self._last: dict[str, int] = {}
        self._round = 0

    def feed(self, line: str) -> list[str]:
        if line.startswith(("@vq_n0[", "@vq_x0[")):
            key, _, value = line.partition("]: ")
            try:
                total = int(value)
            except ValueError:
                return [line]
            if key[4] == "n":
                rise = total - self._last.get(key, 0)
                self._last[key] = total
                return [f"{key}]: {rise}"] if rise else []
            if total >> DUMP_TAG >= self._round - 1:      # newer: dtrace printed this dump late
                return [f"{key}]: {total & ((1 << DUMP_TAG) - 1)}"]
            return []
        if line.startswith("zfsobs 1 vq_dump "):
            self._round = int(next((p[6:] for p in line.split() if p.startswith("round=")), "0") or 0)
        return [line]
