"""The map-set dumps of a txg probe (zil.bt: probes/linux/sets.btm) into its lines (docs/events.md).

The probe counts into bpftrace's per-CPU sum()/max() maps keyed [pid, spa, txg, slot] and prints
one of its sets every 500 ms: a `set_dump` line (end= when the probes left the set), the maps as
bpftrace prints them (`@n1[pid, spa, txg, slot]: value`, the CPUs added up) and `set_dump_end`.
This adds the dumps up per (pid, spa, txg), with the slots of the probe's field table
(zfsobs/fields.py), and writes the lines the models read:
- while a txg is open, its cumulative lines (final=0) at most once a second, stamped with the dump;
- once its `zil_close` (spa_sync entry) is covered by the dumps (a dump that ends at or after it),
  its final lines (final=1), stamped with the close: the txg probe's sync of the same moment;
- a count that reaches a txg after its final lines (a probe that read the open txg just before it
  closed and counted a moment later) makes its lines again at that dump, final=2, which replace them;
- at the stop (flush), the lines of every txg still open (the kernel's open txgs).
Every line of a txg is the sum over the CPUs (cpu=0). Other lines pass through."""
from __future__ import annotations

import re
import threading
from collections import OrderedDict

from zfsobs.events import format_line
from zfsobs.fields import KINDS, ZIL_COUNTS, ZIL_ITX, ZIL_LAT, ZIL_LAT_SEGMENT

MASK = (1 << 64) - 1
EMIT_NS = 1_000_000_000       # an open txg's lines at most this often
KEEP_FINAL = 64               # finished txgs whose counts stay for a late count (per probe)
KEEP_NAMES = 4096             # pool names kept (a process's pools; ztest makes new ones each pass)
MAP_KEYS = 65536              # bpftrace's map size (zfsobs/sources/bpftrace.py): a full map lost counts
OWN = frozenset({"set_dump", "set_dump_end", "zil_id", "zil_close"})
_HEAD = ("pool", "pid", "txg", "cpu", "final")
LINES = {"zil": _HEAD + ("commits", "lat_ns", "lat_max_ns") + ZIL_COUNTS,      # the lines made here
         "zil_itx": _HEAD + ZIL_ITX,
         "zil_lat": _HEAD + ("seg",) + tuple(f"b{i}" for i in range(ZIL_LAT_SEGMENT))}
_ENTRY = re.compile(r"^@([nx])(\d+)\[(-?\d+), (-?\d+), (-?\d+), (-?\d+)\]: (-?\d+)$")


def _fields(parts: list[str]) -> dict[str, str]:
    return dict(p.split("=", 1) for p in parts[4:] if "=" in p)


class SetDumps:
    def __init__(self, probe: str = "zil"):
        self.kind = KINDS[probe]
        self.probe = probe
        self.sums: dict[tuple, list[int]] = {}      # (pid, spa, txg) -> cumulative sums
        self.tops: dict[tuple, list[int]] = {}      # (pid, spa, txg) -> maxima
        self.names: OrderedDict[tuple, str] = OrderedDict()   # (pid, spa) -> pool name
        self.closing: dict[tuple, int] = {}         # closed, final lines not yet made: key -> close ts
        self.done: OrderedDict[tuple, int] = OrderedDict()    # final lines made: key -> close ts
        self.forgotten: OrderedDict[tuple, int] = OrderedDict()   # (pid, spa) -> last txg forgotten
        self.dirty: set[tuple] = set()              # counts moved since the key's last lines
        self.shown: dict[tuple, int] = {}           # open key -> its last lines' time
        self.dump: dict | None = None               # the dump being read
        self.end = 0                                # the last dump's end
        self.lock = threading.Lock()                # feed (a pipe's reader thread) against flush

    def feed(self, line: str) -> list[str]:
        with self.lock:
            return self._feed(line)

    def flush(self) -> list[str]:
        """At the stop, once the dumps cover it: the lines of every txg with counts not yet shown."""
        with self.lock:
            out = self._lines()
            for key in sorted(self.dirty):
                out += self._txg_lines(key, self.end, 2 if key in self.done else 0)
            self.dirty.clear()
            return out

    def _feed(self, line: str) -> list[str]:
        if line.startswith("@"):
            if self.dump is not None:
                m = _ENTRY.match(line)
                if m:
                    which, pid, k1, k2, slot, value = m.group(1), *(int(g) & MASK for g in m.groups()[2:6]), int(m.group(7))
                    self.dump[which].setdefault((pid, k1, k2), {})[slot] = value
                    self.dump["entries"][(which, m.group(2))] = self.dump["entries"].get((which, m.group(2)), 0) + 1
            return []
        parts = line.split()
        kind = parts[2] if len(parts) > 3 and parts[0] == "zfsobs" else ""
        if kind not in OWN:
            return [line] if line.strip() else []
        f = _fields(parts)
        if kind == "set_dump":
            self.dump = {"end": int(f.get("end", parts[3])), "n": {}, "x": {}, "entries": {}}
            return []
        if kind == "set_dump_end":
            dump, self.dump = self.dump, None
            return self._add(dump) if dump is not None else []
        pid, spa = int(f.get("pid", 0)), int(f.get("spa", "0"), 16)
        self._name(pid, spa, f.get("pool", "?"))
        if kind == "zil_close":
            key = (pid, spa, int(f.get("txg", 0)))
            if key not in self.done:
                self.closing[key] = int(parts[3])
            return self._lines() if self.closing.get(key, 1 << 63) <= self.end else []
        return []

    def _name(self, pid: int, spa: int, pool: str) -> None:
        self.names[(pid, spa)] = pool
        self.names.move_to_end((pid, spa))
        while len(self.names) > KEEP_NAMES:
            self.names.popitem(last=False)

    def _add(self, dump: dict) -> list[str]:
        out = []
        full = sum(1 for n in dump["entries"].values() if n >= MAP_KEYS)
        if full:        # a set map ran out of keys: counts of keys it could not make are gone
            out.append(format_line("lost", dump["end"], {"count": full, "probe": self.probe, "cause": "map_full"}))
        nsum, ntop = len(self.kind.sums), len(self.kind.tops)
        late_gone = 0
        for which, entries in (("n", dump["n"]), ("x", dump["x"])):
            for key, slots in entries.items():
                if key not in self.sums and (key in self.done or key[2] <= self.forgotten.get(key[:2], -1)):
                    late_gone += 1      # counted after its final lines were made and forgotten
                    continue
                sums = self.sums.setdefault(key, [0] * nsum)
                tops = self.tops.setdefault(key, [0] * ntop)
                for slot, value in slots.items():
                    if which == "n" and slot < nsum:
                        sums[slot] += value
                    elif which == "x" and slot < ntop:
                        tops[slot] = max(tops[slot], value)
                self.dirty.add(key)
        if late_gone:
            out.append(format_line("lost", dump["end"], {"count": late_gone, "probe": self.probe, "cause": "late"}))
        self.end = max(self.end, dump["end"])
        return out + self._lines()

    def _lines(self) -> list[str]:
        """The final lines of the closed txgs the dumps now cover, a late txg's again, and the open
        txgs' lines that are due."""
        out = []
        for key, ts in sorted(self.closing.items(), key=lambda kv: kv[1]):
            if ts > self.end:
                continue
            del self.closing[key]
            self.shown.pop(key, None)
            if key in self.sums:
                out += self._txg_lines(key, ts, 1)
            self.dirty.discard(key)
            self.done[key] = ts
            while len(self.done) > KEEP_FINAL:
                old, _ = self.done.popitem(last=False)
                self.forgotten[old[:2]] = max(old[2], self.forgotten.get(old[:2], -1))
                self.forgotten.move_to_end(old[:2])
                while len(self.forgotten) > KEEP_NAMES:
                    self.forgotten.popitem(last=False)
                self.sums.pop(old, None)
                self.tops.pop(old, None)
        for key in sorted(self.dirty):
            if key in self.closing:
                continue            # its final lines come once the dumps cover its close
            if key in self.done:
                out += self._txg_lines(key, self.end, 2)
            elif self.end - self.shown.get(key, -EMIT_NS) >= EMIT_NS:
                self.shown[key] = self.end
                out += self._txg_lines(key, self.end, 0)
            else:
                continue
            self.dirty.discard(key)
        return out

    def _txg_lines(self, key: tuple, ts: int, final: int) -> list[str]:
        pid, spa, txg = key
        sums, tops = self.sums.get(key), self.tops.get(key)
        if sums is None:
            return []
        v = dict(zip(self.kind.sums, sums))
        head = {"pool": self.names.get((pid, spa), "?"), "pid": pid, "txg": txg, "cpu": 0, "final": final}
        out = [format_line("zil", ts, {**head, "commits": v["commits"], "lat_ns": v["lat_ns"],
                                       "lat_max_ns": tops[0], **{n: v[n] for n in ZIL_COUNTS}}),
               format_line("zil_itx", ts, {**head, **{n: v[n] for n in ZIL_ITX}})]
        for seg in range(len(ZIL_LAT) // ZIL_LAT_SEGMENT if v["commits"] else 0):
            names = ZIL_LAT[seg * ZIL_LAT_SEGMENT:(seg + 1) * ZIL_LAT_SEGMENT]
            out.append(format_line("zil_lat", ts, {**head, "seg": seg,
                                                   **{f"b{i}": v[n] for i, n in enumerate(names)}}))
        return out
