"""ZIL activity per pool and txg (docs/zil.md), from the zil probe's per-CPU cumulative lines.

A (pool, pid, txg) row is the sum over CPUs of each CPU's latest line, so a refresh (final=0), the
final line (final=1) and its reprint after a late count (final=2) never double count. Lines of one
flush share a timestamp; any other line for a row that was already final comes from another
incarnation of the pool that reached the same txg number again (ztest re-imports pools), and
starts a new row. The same deltas feed a per-pool time series for rates (bytes/s, the max
1-second rate) in live views and zilstat's interval mode.
"""
from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field
from operator import itemgetter

from zfsobs.events import Event
from zfsobs.fields import ZIL_COUNTS, ZIL_ITX, ZIL_LAT_BUCKETS, ZIL_LAT_SEGMENT

COUNTERS = ("commits", "lat_ns") + ZIL_COUNTS       # the zil line's sums (zfsobs/fields.py)
ITX_TYPES = len(ZIL_ITX)        # tx0..tx24 and txother
LAT_BUCKETS = ZIL_LAT_BUCKETS   # two zil_lat segments of 25
SEGMENT = ZIL_LAT_SEGMENT
FLOW_KEEP_NS = 600 * 10**9
ORDER_NS = 10 * 10**9     # how far out of time order a ZIL line may arrive (the flow's walk back)
KEEP = 5000              # rows kept per pool (a report hands older ones to its ledger)
SETTLED = 16             # rows newer than a final row before its per-CPU parts are dropped
SAME_SYNC_NS = 50 * 10**6   # the zil and txg probes see one spa_sync entry within microseconds

TX_NAMES = ("commit", "create", "mkdir", "mkxattr", "symlink", "remove", "rmdir", "link", "rename",
            "write", "truncate", "setattr", "acl_v0", "acl", "create_acl", "create_attr",
            "create_acl_attr", "mkdir_acl", "mkdir_attr", "mkdir_acl_attr", "write2", "setsaxattr",
            "rename_exchange", "rename_whiteout", "clone_range", "other")


def size_bin(lwb_size: int) -> str:
    """zilstat's log block size classes, as the probe counts them."""
    if lwb_size <= 4096:
        return "lwb_le4k"
    return "lwb_4to32k" if lwb_size < 32768 else "lwb_ge32k"


def lat_bucket(ns: int) -> int:
    """The probe's latency bucket: 0 below 1024 ns, then two per power of two."""
    if ns < 1024:
        return 0
    e = ns.bit_length() - 1
    return min(LAT_BUCKETS - 1, 1 + (e - 10) * 2 + ((ns >> (e - 1)) & 1))


def lat_bounds(i: int) -> tuple[int, float]:
    """[low, high) of latency bucket i in ns (the last bucket is open ended)."""
    if i == 0:
        return 0, 1024
    e, upper_half = 10 + (i - 1) // 2, (i - 1) % 2
    low = (1 << e) + upper_half * (1 << (e - 1))
    high = float("inf") if i == LAT_BUCKETS - 1 else low + (1 << (e - 1))
    return low, high


def lat_quantile(hist: list[int], q: float, exact_max: int | None = None) -> int | None:
    """Nearest-rank quantile as its bucket's upper bound, capped at the exact maximum."""
    total = sum(hist)
    if not total:
        return None
    rank = max(1, math.ceil(q * total - 1e-9))
    seen = 0
    for i, n in enumerate(hist):
        seen += n
        if seen >= rank:
            high = lat_bounds(i)[1]
            if exact_max is not None:
                return int(min(high, exact_max))
            return None if high == float("inf") else int(high)
    return exact_max


@dataclass(slots=True)
class ZilRow:
    pool: str
    pid: int
    txg: int
    last_ts: int = 0
    final: bool = False
    counts: Counter = field(default_factory=Counter)
    lat_max_ns: int = 0
    itx_types: list = field(default_factory=lambda: [0] * ITX_TYPES)
    lat_hist: list = field(default_factory=lambda: [0] * LAT_BUCKETS)
    _parts: dict = field(default_factory=dict)      # (kind, cpu, seg) -> that CPU's latest values

    def as_dict(self) -> dict:
        out = {"pool": self.pool, "pid": self.pid, "txg": self.txg, "final": self.final}
        out.update({name: self.counts[name] for name in COUNTERS})
        out["lat_max_ns"] = self.lat_max_ns
        for q, name in ((0.5, "lat_p50_ns"), (0.99, "lat_p99_ns")):
            out[name] = lat_quantile(self.lat_hist, q, self.lat_max_ns)
        out.update({f"tx_{n}": c for n, c in zip(TX_NAMES, self.itx_types)})
        return out


class PoolZil:
    def __init__(self, keep: int | None, retire=None):
        self.rows: dict[tuple[int, int], ZilRow] = {}     # (pid, txg) -> its latest row
        self.order: deque[ZilRow] = deque()
        self.keep = keep
        self.retire = retire                  # called with each row dropped (a report's ledger)
        self.totals: Counter = Counter()      # run totals; rows may be dropped (keep)
        self.lat_totals = [0] * LAT_BUCKETS   # the run's commit latency histogram
        self.flow: deque[tuple[int, Counter]] = deque()   # (ts, deltas) for rates, in arrival order
        self.flowed = 0                       # entries ever appended to flow (zilstat takes each once)
        self.anchor: int | None = None        # whole seconds of the run's busiest second count from here
        self.seconds: Counter = Counter()     # the recent seconds' log bytes (nused)
        self.busiest_before = 0               # the busiest of the seconds no longer in `seconds`

    def row(self, ev: Event) -> ZilRow:
        key = (int(ev.get("pid", 0)), int(ev.fields["txg"]))
        row = self.rows.get(key)
        if row is None or (row.final and ev.ts != row.last_ts and ev.get("final") != 2):
            row = self.rows[key] = ZilRow(str(ev.fields["pool"]), key[0], key[1])
            self.order.append(row)
            if len(self.order) > SETTLED:
                # a flush touches the few open txgs; a final row this far back gets no more lines,
                # so its per-CPU parts (up to 94 numbers a CPU) go: 5000 rows of a 64-CPU box
                old = self.order[-SETTLED - 1]
                if old.final:
                    old._parts.clear()
            while self.keep is not None and len(self.order) > self.keep:
                old = self.order.popleft()
                if self.retire is not None:
                    self.retire(old)
                if self.rows.get((old.pid, old.txg)) is old:
                    del self.rows[(old.pid, old.txg)]
        if ev.get("final") == 1:       # the final lines' time is the sync's: at_sync joins it by it
            row.last_ts = ev.ts
        elif ev.get("final") != 2:     # a reprint keeps the row's time
            row.last_ts = max(row.last_ts, ev.ts)
        row.final = row.final or ev.get("final") in (1, 2)
        return row

    def at_sync(self, pid: int, txg: int, sync_start_ns: int) -> ZilRow | None:
        """The row whose final flush came from this sync (spa_sync entry, seen by both probes)."""
        for row in reversed(self.order):
            if row.pid == pid and row.txg == txg and row.final and abs(row.last_ts - sync_start_ns) < SAME_SYNC_NS:
                return row
            if row.last_ts < sync_start_ns - 60 * 10**9:
                return None
        return None

    def window(self, since_ns: int) -> list[ZilRow]:
        return [r for r in self.order if r.last_ts >= since_ns]

    def bytes_between(self, start_ns: int, end_ns: int, name: str = "nused") -> int:
        return sum(d[name] for ts, d in self._since(start_ns) if ts <= end_ns)

    def _since(self, start_ns: int):
        """The flow's entries after start_ns, newest first: a frame asks for the last minute of ten
        (a busy pool's tens of thousands of entries), and lines arrive in their time's order but
        for the CPUs' buffers, so one ORDER_NS older than the start ends the walk."""
        for ts, d in reversed(self.flow):
            if ts <= start_ns:
                if ts <= start_ns - ORDER_NS:
                    return
                continue
            yield ts, d

    def add_flow(self, ts: int, delta: Counter) -> None:
        self.flow.append((ts, delta))
        self.flowed += 1
        while self.flow and ts - self.flow[0][0] > FLOW_KEEP_NS:
            self.flow.popleft()
        if self.anchor is None:
            self.anchor = ts - 1
        if ts > self.anchor:
            sec = (ts - self.anchor) // 10**9
            self.seconds[sec] += delta["nused"]
            if len(self.seconds) > 2 * FLOW_KEEP_NS // 10**9:     # a line is never later than the flow kept
                for old in [k for k in self.seconds if k < sec - FLOW_KEEP_NS // 10**9]:
                    self.busiest_before = max(self.busiest_before, self.seconds.pop(old))

    def busiest_second(self) -> float:
        """The run's busiest whole second of log bytes, counted from its first ZIL line (a
        report's Max-Rate over the whole capture; max_rate's flow keeps the last 10 minutes)."""
        return float(max(self.busiest_before, max(self.seconds.values(), default=0)))

    def max_rate(self, start_ns: int, end_ns: int, name: str = "nused") -> float:
        """The busiest whole second inside (start, end]: zilstat's Max-Rate."""
        per_second: Counter = Counter()
        for ts, d in self._since(start_ns):
            if ts <= end_ns:
                per_second[(ts - start_ns) // 10**9] += d[name]
        return float(max(per_second.values(), default=0))


class ZilModel:
    kinds = ("zil", "zil_itx", "zil_lat")

    def __init__(self, keep: int | None = KEEP, retire=None):
        self.keep = keep
        self.retire = retire
        self.pools: dict[str, PoolZil] = {}

    def feed(self, ev: Event) -> None:
        f = ev.fields
        pool = str(f["pool"])
        state = self.pools.get(pool)
        if state is None:
            state = self.pools[pool] = PoolZil(self.keep, self.retire)
        row = state.row(ev)
        cpu = int(f["cpu"])
        if ev.kind == "zil":
            new = [int(f.get(n) or 0) for n in COUNTERS]
            old = row._parts.get(("zil", cpu, 0), [0] * len(COUNTERS))
            row._parts[("zil", cpu, 0)] = new
            delta = Counter({n: b - a for n, a, b in zip(COUNTERS, old, new) if b != a})
            row.counts.update(delta)
            state.totals.update(delta)
            row.lat_max_ns = max(row.lat_max_ns, int(f.get("lat_max_ns") or 0))
            if delta:
                state.add_flow(ev.ts, delta)
        elif ev.kind == "zil_itx":
            new = [int(f.get(f"tx{i}") or 0) for i in range(ITX_TYPES - 1)] + [int(f.get("txother") or 0)]
            self._merge(row, ("itx", cpu, 0), new, (row.itx_types,), 0)
        else:
            seg = int(f.get("seg") or 0)
            new = [int(f.get(f"b{i}") or 0) for i in range(SEGMENT)]
            self._merge(row, ("lat", cpu, seg), new, (row.lat_hist, state.lat_totals), seg * SEGMENT)

    @staticmethod
    def _merge(row: ZilRow, key, new: list[int], into: tuple, base: int) -> None:
        """Replace this CPU's part of the row with its newer cumulative values (in each of `into`)."""
        old = row._parts.get(key, [0] * len(new))
        row._parts[key] = new
        for i, (a, b) in enumerate(zip(old, new)):
            for hist in into:
                hist[base + i] += b - a

    def stats(self, pool: str, rows: list[ZilRow]) -> dict:
        """Totals and commit latency over `rows` (one pool)."""
        acc = ZilStats()
        acc.add_all(rows)
        return acc.result(pool)


class ZilStats:
    """ZilModel.stats over rows added in batches (a window, or a capture's rows as they retire)."""

    def __init__(self):
        self.n, self.lat_max = 0, 0
        self.counts: Counter = Counter()
        self.hist = [0] * LAT_BUCKETS

    def add_all(self, rows) -> None:
        """Each of `rows`, a figure at a time over all of them (a live frame's minute: ~400 rows)."""
        rows = list(rows)
        if not rows:
            return
        self.n += len(rows)
        counts = [r.counts for r in rows]
        for name in COUNTERS:         # all result() reads
            self.counts[name] += sum(map(itemgetter(name), counts))
        self.hist = [sum(col) for col in zip(self.hist, *(r.lat_hist for r in rows))]
        self.lat_max = max(self.lat_max, *(r.lat_max_ns for r in rows))

    def result(self, pool: str) -> dict:
        counts, hist, lat_max = self.counts, self.hist, self.lat_max
        commits = counts["commits"]
        return {
            "pool": pool, "txgs": self.n, **{n: counts[n] for n in COUNTERS},
            "lat_mean_ns": counts["lat_ns"] // commits if commits else None,
            "lat_p50_ns": lat_quantile(hist, 0.5, lat_max), "lat_p99_ns": lat_quantile(hist, 0.99, lat_max),
            "lat_max_ns": lat_max if commits else None, "lat_hist": list(hist),
        }
