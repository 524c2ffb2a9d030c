"""The vdev_queue probe's dumps into the vq, vq_lat and vq_vdev lines of docs/events.md.

The probe (probes/linux/vdev_queue.bt) counts in bpftrace's per-CPU sum()/max() maps and prints
one of its sets of them (zfsobs/targets/sets.py) every 500 ms (longer when bpftrace falls behind), as
bpftrace prints maps: a `@vq_n1[pid, vd, class, slot]: value` line per key, between a `vq_dump` and a
`vq_dump_end` line. bpftrace has already added up the CPUs; the sums are what happened in the set's
time. This adds them up over time, per vdev and class, and writes the cumulative lines the rest of zfsobs reads. Its other lines pass through unchanged."""
from __future__ import annotations

import re
import threading

from zfsobs.events import MAGIC, SCHEMA_VERSION, Event, EventLine, event_line, format_line, key_values
from zfsobs.fields import VDEV_QUEUE, VQ_BUCKETS as BUCKETS, VQ_COUNTS as SLOTS


def _at(name: str) -> int:
    return VDEV_QUEUE.slot(name)[1]


# the counted fields and their slots (the rest of a vq line's counts follow from them: VDEV_QUEUE.derive)
COUNTED = tuple((name, at) for at, name in enumerate(VDEV_QUEUE.sums) if not name.startswith("unused"))
PEND_US, ACT_US = _at("pend_us"), _at("act_us")
SLACK = 4       # a depth may run ahead of ZFS's by the threads between its lock and the probe
FIRST_SLACK_NS = 5_000_000_000     # the probes' start to their first dump, at most (TCG included)
WAIT_HIST, DEV_HIST = _at("wait_b0"), _at("dev_b0")
MASK = (1 << 64) - 1
EMIT_NS = 400_000_000      # lines per vdev at most a dump's time apart (500 ms; less a late tick's jitter)
# the kinds the probe prints for this module only, and the lines (with their fields) made of them
OWN = frozenset({"vq_id", "vq_free", "vq_dump", "vq_dump_end"})
LINES = {"vq": ("pool", "pid", "vd", "class", "final", "pend", "act", "pend_ns", "act_ns", "pend_max",
                "act_max") + SLOTS + ("max_active", "min_active"),
         "vq_lat": ("pid", "vd", "class", "kind") + tuple(f"b{b}" for b in range(BUCKETS)),
         "vq_vdev": ("pool", "pid", "vd", "guid", "final", "vdev_max", "path")}


# limit readings kept waiting for their lines' time per process: a few dumps' worth (~1 s)
LIMITS_WAITING = 16
# A dump's count and maximum entries, read at its end in one pass (a busy lab prints ~3k a second:
# one call per entry was most of what the live view spent on the vdev queue). A dump with any
# entry not of this form is read an entry at a time instead.
_COUNTS = re.compile(r"^@vq_([nx])\d+\[(-?\d+, -?\d+, -?\d+), (-?\d+)\]: (-?\d+)$", re.M)
_BUCKET_KEYS = tuple(f"b{b}" for b in range(BUCKETS))
_LAT = (f"{MAGIC} {SCHEMA_VERSION} vq_lat %d pid=%d vd=%s class=%d kind=%d "
        + " ".join(f"b{b}=%d" for b in range(BUCKETS)))


def _vdev_class(head) -> tuple[int, int, int, int]:
    """A printed key's (pid, vd, gen<<4|class) as (pid, vd, gen, class). bpftrace prints a key as a
    signed number: a kernel address (>= 2^63) comes out negative."""
    pid, vd, gc = (int(k) & MASK for k in head)
    return pid, vd, gc >> 4, gc & 15


class VqDumps:
    def __init__(self):
        # a vdev is (pid, vd, gen): gen counts the vdev_t's incarnations at one address
        self.ident: dict[tuple, dict] = {}      # vdev -> pool, guid, vdev_max, path (vq_id lines)
        self.limits: dict[tuple, list] = {}     # (pid, class) -> [max_active, min_active]
        self.later: dict[int, list] = {}        # pid -> [(read at, its limits)]: newer than the lines
        self.last_top: dict[tuple, int] = {}    # vdev + (class, kind) -> the library's last maximum
        self.sums: dict[tuple, dict] = {}       # vdev + (class,) -> slot -> cumulative value
        self.freed: dict[tuple, int] = {}       # vdev -> when vdev_free ran
        self.dump: dict | None = None           # the dump being read
        self.dirty: set = set()                 # vdev + (class,) changed since its last line
        self.tops: dict[tuple, list] = {}       # vdev + (class,) -> [pending, active] maxima since then
        self.emitted: dict[tuple, int] = {}     # vdev -> its last line's time
        self.shown: dict[tuple, tuple] = {}     # vdev + (class,) -> its last line's (end, integrals, depths)
        self.end = 0                            # the last dump's time
        self.first = 0                          # the first dump's time
        self.late = 0                           # the probe's count of late runs, as last printed
        self.lock = threading.Lock()            # feed (a pipe's reader thread) against flush

    def flush(self) -> list[str]:
        """The lines still held back (at the stop, once the last dumps are in), as of the last dump;
        a vdev_t's incarnations at one address one after the other, a nanosecond apart."""
        out: list[str] = []
        with self.lock:
            while lines := self._lines({"end": self.end + bool(out), "n": {}, "x": {}}, every=True):
                out += lines
        return out

    def feed(self, line: str) -> list[str]:
        """Lines for the stream: none while a dump is read, its lines at its end."""
        if line.startswith("@"):           # a printed map: only a dump's are read
            if self.dump is not None:
                self.dump["raw"].append(line)
            return []
        parts = line.split()
        kind = parts[2] if len(parts) > 3 and parts[0] == "zfsobs" else ""
        if kind == "vq_dump":
            fields = key_values(parts, strict=True)
            self.dump = {"end": int(fields["end"]), "n": {}, "x": {}, "lim": {}, "lt": {}, "raw": []}
            # probe runs so long (a stalled CPU) that their counts may have missed their dump
            late = int(fields.get("late", 0))
            if late > self.late:
                self.late, more = late, late - self.late
                return [format_line("lost", int(parts[3]), {"count": more, "probe": "vdev_queue"})]
        elif kind == "vq_dump_end":
            dump, self.dump = self.dump, None
            if not dump:
                return []
            self._read(dump)
            with self.lock:
                return self._lines(dump)
        elif kind == "vq_id":
            fields = key_values(parts, strict=True)
            self.ident[(int(fields["pid"]), int(fields["vd"], 16), int(fields["gen"]))] = fields
        elif kind == "vq_free":
            fields = key_values(parts, strict=True)
            self.freed[(int(fields["pid"]), int(fields["vd"], 16), int(fields["gen"]))] = int(parts[3])
        elif line.strip():
            return [line]
        return []

    def _read(self, dump: dict) -> None:
        """The dump's entries into its maps: the counts and maxima in one pass, the rest (limits,
        a few per process) an entry at a time."""
        raw = dump.pop("raw")
        rest = [line for line in raw if not line.startswith(("@vq_n", "@vq_x"))]
        counts = _COUNTS.findall("\n".join(raw))
        if len(counts) + len(rest) != len(raw):
            rest = raw
        else:
            maps, heads = {"n": dump["n"], "x": dump["x"]}, {}
            for kind, head, slot, value in counts:
                key = heads.get(head)
                if key is None:
                    key = heads[head] = _vdev_class(head.split(", "))
                maps[kind].setdefault(key, {})[int(slot) & MASK] = int(value)
        for line in rest:
            self._entry(line, dump)

    def _entry(self, line: str, dump: dict) -> None:
        name, _, rest = line.partition("[")
        keys, _, value = rest.partition("]: ")
        key = tuple(int(k) & MASK for k in keys.split(", "))
        if name[:5] in ("@vq_n", "@vq_x") and name[5:].isdigit() and len(key) == 4:
            dump[name[4]].setdefault(_vdev_class(key[:3]), {})[key[3]] = int(value)
        elif name == "@vq_lma":
            dump["lim"].setdefault(key, [-1, -1])[0] = int(value)
        elif name == "@vq_lmi":
            dump["lim"].setdefault(key, [-1, -1])[1] = int(value)
        elif name == "@vq_lt":
            dump["lt"][key[0]] = int(value)

    def _limits(self, dump: dict, end: int) -> None:
        """The limits as of `end`. bpftrace reads the map when it prints it, after `end` (by 450 ms
        and more, since a set is printed that long after the probes left it): a value read later
        waits, in order, for the lines of its time, so a tunable changed meanwhile is not put on
        lines from before the change, nor held back for good by the next dump's later reading."""
        for pid in {p for p, _ in dump.get("lim", {})}:
            lim = {k: v for k, v in dump["lim"].items() if k[0] == pid}
            if not any(k[0] == pid for k in self.limits):
                self.limits.update(lim)     # a process's first: better than none
            else:
                self.later.setdefault(pid, []).append((dump["lt"].get(pid, 0), lim))
        for pid, waiting in self.later.items():
            while waiting and waiting[0][0] <= end:
                self.limits.update(waiting.pop(0)[1])
            del waiting[:-LIMITS_WAITING]

    def _lines(self, dump: dict, every: bool = False) -> list[str]:
        end = self.end = dump["end"] or self.end
        self.first = self.first or end
        self._limits(dump, end)
        for key, slots in dump["n"].items():
            sums = self.sums.setdefault(key, {})
            for slot, value in slots.items():
                sums[slot] = sums.get(slot, 0) + value
            self.dirty.add(key)
        for key, maxima in dump["x"].items():
            top = self.tops.setdefault(key, [None, None])
            for k, value in maxima.items():
                top[k] = value if top[k] is None else max(top[k], value)
            self.dirty.add(key)
        gens: dict[tuple, set] = {}             # (pid, vd) -> the incarnations with counts
        for pid, vd, gen, _ in self.sums:
            gens.setdefault((pid, vd), set()).add(gen)
        # a newer incarnation at an address proves the older one's vdev_free ran before this dump's
        # end, had its vq_free line been lost
        for (pid, vd), seen in gens.items():
            for gen in seen - {max(seen)}:
                self.freed.setdefault((pid, vd, gen), end)
        # a freed vdev: the dump covering its vdev_free holds its last counts
        final = {v for v, t in self.freed.items() if end >= t}
        for vdev in final - {k[:3] for k in self.sums}:     # no I/O counted: no line to make
            self.freed.pop(vdev, None)
            self.ident.pop(vdev, None)
        final = {v for v in final if v in self.freed}
        if final:
            self.dirty.update(k for k in self.sums if k[:3] in final)
        if not end:
            return []
        # a vdev's lines at most every EMIT_NS of the dumps' times (a tick that fired late is followed
        # by one on time); what changed meanwhile waits for the next dump that has a line
        due = {k[:3] for k in self.dirty if every or k[:3] in final or end - self.emitted.get(k[:3], 0) >= EMIT_NS}
        # a vdev_t allocated again at a freed one's address waits until the old one's final lines are
        # out: lines of both at one time would carry the same (pid, vd)
        due = {v for v in due if v in final or min(gens.get(v[:2], {v[2]})) >= v[2]}
        # and when both are final in one dump (freed within a tick), the newer waits for the next
        first: dict[tuple, tuple] = {}
        for vdev in sorted(due):
            first.setdefault(vdev[:2], vdev)
        due = set(first.values())
        keys = sorted(k for k in self.dirty if k[:3] in due)
        self.dirty.difference_update(keys)
        out = []
        for key in keys:
            out += self._vq(end, key, self.sums.setdefault(key, {}), self.tops.pop(key, (None, None)),
                            key[:3] in final)
        for vdev in sorted(due):
            pid, vd, _ = vdev
            last = vdev in final
            self.emitted[vdev] = end
            ident = self.ident.get(vdev, {})
            out.append(event_line("vq_vdev", end, {
                "pool": ident.get("pool", "?"), "pid": pid, "vd": hex(vd), "guid": ident.get("guid", 0),
                "final": int(last), "vdev_max": ident.get("vdev_max", -1), "path": ident.get("path", "?")}))
            if last:
                self.sums = {k: v for k, v in self.sums.items() if k[:3] != vdev}
                self.last_top = {k: v for k, v in self.last_top.items() if k[:3] != vdev}
                for table in (self.freed, self.ident, self.emitted):
                    table.pop(vdev, None)
        return out

    def _top(self, key: tuple, top, now: int) -> int:
        """A line's maximum depth: the library's own count (-1: no offsets for it). With no reading
        since the last line the depth has not moved: it is ours now, but never above the library's
        last maximum, as a completion the kernel skipped running the probe for leaves ours one high."""
        if top is None:
            last = self.last_top.get(key)
            return now if last is None else min(now, last)
        if top >= 0:
            self.last_top[key] = top
        return top

    def _vq(self, end: int, key: tuple, sums: dict, tops, last: bool) -> list[str]:
        pid, vd, gen, cls = key
        if last:    # ZFS frees only an idle vdev: its final lines read it so (docs/fidelity.md, "Open")
            sums.update({PEND_US: 0, ACT_US: 0})
        get = sums.get
        v = VDEV_QUEUE.derive({name: get(at, 0) for name, at in COUNTED})
        pend, act = (0, 0) if last else (v["pend"], v["act"])
        end_us = end // 1000
        # the time integral of depth up to `end`: the waits that ended, plus each I/O still in the
        # queue from its entry (or issue) to `end`
        pend_ns = v["wait_ns"] + v["pend_gone_ns"] + (pend * end_us - v["pend_us"]) * 1000
        act_ns = v["dev_ns"] + v["act_gone_ns"] + (act * end_us - v["act_us"]) * 1000
        # a probe run the kernel skips (a completion not seen) leaves a depth one off; the clears
        # that took unprinted writes (the cause of CI's pend -1 and act 2 readings) are gone. A depth
        # is never shown below 0 or above ZFS's own maximum of the dump; the counts and time
        # integrals stay as counted.
        pend, act = max(0, pend), max(0, act)
        pend_max, act_max = (self._top(key + (k,), top, now) for k, (top, now) in enumerate(zip(tops, (pend, act))))
        pend, act = (now if top < 0 else min(now, top) for now, top in ((pend, pend_max), (act, act_max)))
        limits = self.limits.get((pid, cls), [-1, -1])
        pend_ns, act_ns = self._untorn(key, end, (pend_ns, act_ns), (pend, act),
                                       (pend_max, max(act_max, limits[0])), (v["wait_ns"], v["dev_ns"]), last)
        fields = {"pool": self.ident.get(key[:3], {}).get("pool", "?"), "pid": pid, "vd": hex(vd),
                  "class": cls, "final": int(last), "pend": pend, "act": act,
                  "pend_ns": pend_ns, "act_ns": act_ns,
                  "pend_max": pend_max, "act_max": act_max}
        fields.update((name, v[name]) for name in SLOTS)
        fields["max_active"], fields["min_active"] = limits
        lines = [event_line("vq", end, fields)]
        for kind, base in ((0, WAIT_HIST), (1, DEV_HIST)):
            lines.append(_lat(end, pid, hex(vd), cls, kind, [get(base + b, 0) for b in range(BUCKETS)]))
        return lines

    def _untorn(self, key: tuple, end: int, got: tuple, depths: tuple, tops: tuple, done: tuple,
                last: bool) -> tuple:
        """The depth integrals, each grown since the key's last line by 0 to the time between times
        the depth ZFS allowed, and never below the waits that ended (tests/vq_ledger.py's rules).
        D's totals can break them for one dump: dtrace copies a CPU's counts while a preempted
        probe there is half-way through an I/O's, and a depth one off against the sum of entry
        times costs the whole uptime. Such a reading is replaced by the line before's plus the mean
        of the two lines' depths over the time between (within the rules); later totals heal it.
        bpftrace's map sets are read whole and keep the rules (the lab tests hold them to it)."""
        prev = self.shown.pop(key, None)
        out = list(got)
        if prev is None:        # a key's first line: what ended, plus at most its depth since the first dump
            since = end - self.first + FIRST_SLACK_NS
            for i, (ended, top, now) in enumerate(zip(done, tops, depths)):
                if not ended <= out[i] <= ended + since * (max(top, now) + SLACK):
                    out[i] = ended
        else:
            dt, was_all, before = end - prev[0], prev[1], prev[2]
            for i, (was, ended, depth, top, now) in enumerate(zip(was_all, done, before, tops, depths)):
                low, high = max(was, ended), was + dt * (max(depth, top, now) + SLACK)
                if not low <= out[i] <= high:
                    out[i] = max(low, min(high, was + dt * (depth + now) // 2))
        if not last:
            self.shown[key] = (end, tuple(out), depths)
        return tuple(out)


def _lat(end: int, pid: int, vd: str, cls: int, kind: int, counts: list[int]) -> str:
    """event_line's vq_lat line, its text from a template (a busy lab makes hundreds a second)."""
    fields = {"pid": pid, "vd": vd, "class": cls, "kind": kind, **dict(zip(_BUCKET_KEYS, counts))}
    if -1 in counts:      # a count the parser would read as None
        return event_line("vq_lat", end, fields)
    line = EventLine(_LAT % (end, pid, vd, cls, kind, *counts))
    line.event = Event("vq_lat", end, fields)
    return line
