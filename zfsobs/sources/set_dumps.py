"""The map-set dumps of a probe (probes/linux/sets.btm) into its lines (docs/events.md, "Map sets").

The probe counts into bpftrace's per-CPU sum()/max() maps keyed [pid, k1, k2, slot] (zil and
throttle: spa_t, txg; vdev_cache: vdev_t, incarnation) and prints one of its sets every 500 ms: a
`set_dump` line (end= when the probes left the set), the maps as bpftrace prints them
(`@n1[pid, k1, k2, slot]: value`, the CPUs added up) and `set_dump_end`. This adds the dumps up per
key, with the slots of the probe's field table (zfsobs/fields.py), and has the probe's writer
(zfsobs/sources/set_lines.py) make its lines, by one rule:
- while a key is open, its lines (final=0) at most once a second, stamped with the dump, once its
  pool is named (zil, throttle: by the pool's first close; probes whose lines come only as a key
  closes: at the stop);
- once its close line (zil, throttle: spa_sync entry; vdev_cache: vdev_free) is covered by the dumps
  (a dump that ends at or after it), its final lines (final=1), stamped with the close;
- a count that reaches a key after its final lines (a probe that read the open txg just before it
  closed and counted a moment later) makes its lines again at that dump (final=2);
- at the stop (flush), the lines of every key with counts not yet shown (the kernel's open txgs,
  its vdevs).
Every line is the sum over the CPUs (cpu=0). Other lines pass through."""
from __future__ import annotations

import re
import threading
from collections import OrderedDict

from zfsobs.events import format_line, key_values
from zfsobs.sources.set_lines import OWN, STREAMS, Counts

MASK = (1 << 64) - 1
EMIT_NS = 1_000_000_000       # an open key's lines at most this often
KEEP_FINAL = 64               # closed keys whose counts stay for a late count (per probe)
KEEP_NOTES = 4096             # note lines kept (a process's pools; ztest makes new ones each pass)
_ENTRY = re.compile(r"^@([nx])(\d+)\[(-?\d+), (-?\d+), (-?\d+), (-?\d+)\]: (-?\d+)$")


def _int(text: str) -> int:
    return int(text, 16) if text.startswith("0x") else int(text)


class SetDumps:
    def __init__(self, probe: str, map_keys: int):
        self.stream = STREAMS[probe]
        self.kind, self.probe = self.stream.kind, probe
        self.map_keys = map_keys                    # the probe's map size: a set map that full lost counts
        self.sums: dict[tuple, list[int]] = {}      # (pid, k1, k2) -> cumulative sums
        self.tops: dict[tuple, list[int]] = {}      # (pid, k1, k2) -> maxima
        self.sent: dict[tuple, dict] = {}           # key -> the values its last lines carried
        self.notes: OrderedDict[tuple, dict] = OrderedDict()   # (line kind, pid, keys...) -> fields
        self.closes: dict[tuple, dict] = {}         # key -> its close line's fields, while it is kept
        self.closing: dict[tuple, int] = {}         # closed, final lines not yet made: key -> close ts
        self.done: OrderedDict[tuple, int] = OrderedDict()    # final lines made: key -> close ts
        self.forgotten: OrderedDict[tuple, int] = OrderedDict()   # (pid, k1) -> last k2 forgotten
        self.dirty: set[tuple] = set()              # counts moved since the key's last lines
        self.shown: dict[tuple, int] = {}           # open key -> its last lines' time
        self.dump: dict | None = None               # the dump being read
        self.end = 0                                # the last dump's end
        self.lock = threading.Lock()                # feed (a pipe's reader thread) against flush

    def feed(self, line: str) -> list[str]:
        with self.lock:
            return self._feed(line)

    def flush(self) -> list[str]:
        """At the stop, once the dumps cover it: the lines of every key with counts not yet shown."""
        with self.lock:
            out = self._lines()
            for key in sorted(self.dirty):
                out += self._key_lines(key, self.end, 2 if key in self.done else 0)
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
        f = key_values(parts)
        try:
            if kind == "set_dump":
                self.dump = {"end": int(f.get("end", parts[3])), "n": {}, "x": {}, "entries": {}}
                return []
            if kind == "set_dump_end":
                dump, self.dump = self.dump, None
                return self._add(dump) if dump is not None else []
            pid = int(f.get("pid", 0))
            if kind == self.stream.close:
                key = (pid, *(_int(f[k]) for k in self.kind.keys))
                self.closes[key] = f
                if key not in self.done:
                    self.closing[key] = int(parts[3])
                return self._lines() if self.closing.get(key, 1 << 63) <= self.end else []
            names = self.stream.notes.get(kind)
            if names is not None:
                self._note((kind, pid, *(_int(f[k]) for k in names)), f)
        except (KeyError, ValueError):
            pass            # not the probe's own line after all: nothing of it is kept
        return []

    def _note(self, key: tuple, fields: dict) -> None:
        self.notes[key] = fields
        self.notes.move_to_end(key)
        while len(self.notes) > KEEP_NOTES:
            self.notes.popitem(last=False)

    def _noted(self, kind: str, key: tuple) -> dict:
        if kind == self.stream.close:       # a key's own, kept as long as the key (a txg each)
            return self.closes.get(key, {})
        return self.notes.get((kind, *key), {})

    def _add(self, dump: dict) -> list[str]:
        out = []
        full = sum(1 for n in dump["entries"].values() if n >= self.map_keys)
        if full:        # a set map ran out of keys: counts of keys it could not make are gone
            out.append(format_line("lost", dump["end"], {"count": full, "probe": self.probe, "cause": "map_full"}))
        nsum, ntop = len(self.kind.sums), len(self.kind.tops)
        late_gone = 0
        for which, entries in (("n", dump["n"]), ("x", dump["x"])):
            for key, slots in entries.items():
                if key in self.done and not self.stream.late_lines:
                    late_gone += 1      # a count this probe's keys cannot have after their close
                    continue
                if key not in self.sums and key not in self.done and key[2] <= self.forgotten.get(key[:2], -1):
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
        """The final lines of the closed keys the dumps now cover, a late key's again, and the open
        keys' lines that are due."""
        out = []
        for key, ts in sorted(self.closing.items(), key=lambda kv: kv[1]):
            if ts > self.end:
                continue
            del self.closing[key]
            self.shown.pop(key, None)
            if key in self.sums:
                out += self._key_lines(key, ts, 1)
            self.dirty.discard(key)
            self.done[key] = ts
            while len(self.done) > KEEP_FINAL:
                self._forget(self.done.popitem(last=False)[0])
        for key in sorted(self.dirty):
            if key in self.closing:
                continue            # its final lines come once the dumps cover its close
            if key in self.done:
                out += self._key_lines(key, self.end, 2)
            elif self.stream.open_lines and self._named(key) and self.end - self.shown.get(key, -EMIT_NS) >= EMIT_NS:
                self.shown[key] = self.end
                out += self._key_lines(key, self.end, 0)
            else:
                continue
            self.dirty.discard(key)
        return out

    def _named(self, key: tuple) -> bool:
        """Is the key's pool named yet (an open txg's lines wait for its pool's first close)?"""
        named = self.stream.named
        return not named or bool(self._noted(named, key[:1 + len(self.stream.notes[named])]))

    def _forget(self, old: tuple) -> None:
        self.forgotten[old[:2]] = max(old[2], self.forgotten.get(old[:2], -1))
        self.forgotten.move_to_end(old[:2])
        while len(self.forgotten) > KEEP_NOTES:
            self.forgotten.popitem(last=False)
        for kept in (self.sums, self.tops, self.sent, self.closes):
            kept.pop(old, None)

    def _key_lines(self, key: tuple, ts: int, final: int) -> list[str]:
        if key not in self.sums:
            return []
        values = self.kind.values(self.sums[key], self.tops[key])
        out = self.stream.write(Counts(key, ts, final, values, self.sent.get(key, {}), self._noted))
        self.sent[key] = values
        return out
