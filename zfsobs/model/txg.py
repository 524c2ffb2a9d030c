"""txg sync state per pool: the recent txgs, each with the write throttle while it was open (the
throttle probe's `txg_thr` line, joined by pool, pid and txg), and statistics over a time window."""
from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass, fields

from zfsobs.events import Event
from zfsobs.fields import THROTTLE_BINS
from zfsobs.model.stats import summary

WINDOW_NS = 60 * 10**9     # statistics cover the last minute of syncs
KEEP = 5000                # rows kept per pool (a report hands older ones to its ledger)
DELAY_BUCKETS = THROTTLE_BINS    # txg_thr's d0..d5: decades from < 10 us to >= 100 ms
PENDING = 64               # txg_thr lines kept for a txg row not yet seen (the txg line comes later)
# (row field, txg_thr field, how lines add up)
THROTTLE_FIELDS = (("dirty_max", "dirty_max", "max"), ("delay_count", "delays", "sum"), ("delay_ns", "delay_ns", "sum"),
                   ("delay_max_ns", "delay_max_ns", "max"), ("txwait_count", "waits", "sum"), ("txwait_ns", "wait_ns", "sum"))
# the txg_thr fields that add up over a txg's lines (counters keep run totals of them too)
THROTTLE_SUMS = tuple(key for _, key, how in THROTTLE_FIELDS if how == "sum") + tuple(f"d{i}" for i in range(DELAY_BUCKETS))
SAME_SYNC_NS = 10**9       # slack for a txg_thr line against its row's sync (two clocks' reads)


@dataclass(slots=True)
class TxgRow:
    pool: str
    pid: int
    txg: int
    start_ns: int          # spa_sync entry (monotonic ns)
    sync_ns: int           # spa_sync entry -> return
    interval_ns: int | None
    dirty_bytes: int | None
    open_ns: int | None
    quiesce_ns: int | None
    wait_ns: int | None
    stime_ns: int | None   # spa_txg_history's own sync time (the txgs kstat's stime)
    # the write throttle while the txg was open (None: not traced; docs/txg.md)
    dirty_max: int | None = None        # highest dirty data a transaction saw as it was assigned
    dirty_data_max: int | None = None   # zfs_dirty_data_max when the txg closed
    delay_min_pct: int | None = None    # zfs_delay_min_dirty_percent then
    delay_scale: int | None = None      # zfs_delay_scale then
    delay_count: int | None = None      # transactions throttled (dmu_tx_dirty_delay + wrlog_delay)
    delay_ns: int | None = None         # their time in dmu_tx_wait()
    delay_max_ns: int | None = None
    delay_hist: list | None = None      # delays < 10 us, < 100 us, < 1 ms, < 10 ms, < 100 ms, >= 100 ms
    txwait_count: int | None = None     # other dmu_tx_wait() calls: waits for a txg
    txwait_ns: int | None = None

    def as_dict(self) -> dict:
        # dataclasses.asdict deep-copies field by field: a third of a long report's row time
        out = {name: getattr(self, name) for name in ROW_FIELDS}
        out["delay_hist"] = self.delay_hist and list(self.delay_hist)
        out["dirty_pct"] = self.dirty_pct
        return out

    @property
    def dirty_pct(self) -> float | None:
        """The highest dirty data as % of zfs_dirty_data_max."""
        if self.dirty_max is None or not self.dirty_data_max or self.dirty_data_max < 0:
            return None
        return 100.0 * self.dirty_max / self.dirty_data_max

    def throttle(self, f: dict) -> None:
        """Add a txg_thr line: bpftrace prints one per txg, DTrace one per flush (docs/events.md):
        counts and times add up, maxima take the larger, the tunables are the latest. A field a
        source cannot give (-1, kstat mode) stays None: unavailable, not 0."""
        for name, key, how in THROTTLE_FIELDS:
            v = f.get(key)
            if v is not None:
                old = getattr(self, name)
                setattr(self, name, v if old is None else max(old, v) if how == "max" else old + v)
        hist = [f.get(f"d{i}") for i in range(DELAY_BUCKETS)]
        if all(n is not None for n in hist):
            self.delay_hist = [a + b for a, b in zip(self.delay_hist or [0] * DELAY_BUCKETS, hist)]
        for name in ("dirty_data_max", "delay_min_pct", "delay_scale"):
            if f.get(name) is not None and not f.get("late"):     # a late line's are the next txg's
                setattr(self, name, f[name])


ROW_FIELDS = tuple(f.name for f in fields(TxgRow))


class PoolTxgs:
    def __init__(self, keep: int | None):
        self.rows: deque[TxgRow] = deque(maxlen=keep)
        self.total = 0

    def window(self, span_ns: int | None = None) -> list[TxgRow]:
        span_ns = WINDOW_NS if span_ns is None else span_ns      # read when used: the tests shrink it
        if not self.rows:
            return []
        end = self.rows[-1].start_ns
        out = []
        for row in reversed(self.rows):
            if end - row.start_ns > span_ns:
                break
            out.append(row)
        out.reverse()
        return out


class TxgModel:
    kinds = ("txg", "txg_thr")

    def __init__(self, keep: int | None = KEEP, retire=None):
        self.keep = keep
        self.retire = retire        # called with each row that leaves the kept ones (a report's ledger)
        self.pools: dict[str, PoolTxgs] = {}
        self.throttled = False                      # a txg_thr line was seen: the throttle is traced
        self._pending: dict[tuple, list] = {}      # (pool, pid, txg) -> [(ts, txg_thr line)] before its txg

    def feed(self, ev: Event) -> None:
        f = ev.fields
        pool = str(f["pool"])
        if ev.kind == "txg_thr":
            self._throttle(pool, ev.ts, f)
            return
        row = TxgRow(pool, int(f.get("pid") or 0), int(f["txg"]), int(f["start"]), int(f["sync_ns"]),
                     f.get("interval_ns"), f.get("dirty"), f.get("open_ns"), f.get("quiesce_ns"),
                     f.get("wait_ns"), f.get("stime_ns"))
        state = self.pools.get(pool)
        if state is None:
            state = self.pools[pool] = PoolTxgs(self.keep)
        if self.retire is not None and len(state.rows) == self.keep:
            self.retire(state.rows[0])
        state.rows.append(row)
        state.total += 1
        for ts, thr in self._pending.pop((pool, row.pid, row.txg), ()):
            if ts <= row.start_ns + SAME_SYNC_NS or thr.get("late"):
                row.throttle(thr)

    def _throttle(self, pool: str, ts: int, f: dict) -> None:
        """A txg's throttle lines come before its sync ends (bpftrace's as it starts, DTrace's at
        each flush while it is open), the txg line after; from separate processes, so either may be
        read first. One process can sync a txg number twice (ztest makes its pool again): a line
        belongs to a row already read only if it is from before that row's sync ended; a late one
        (late=1: what the txg's line missed, printed at the next sync) to the latest row of its txg."""
        self.throttled = True
        pid, txg = int(f.get("pid") or 0), int(f["txg"])
        state = self.pools.get(pool)
        late = bool(f.get("late"))
        for row in reversed(state.rows if state else ()):
            if row.txg == txg and row.pid == pid and (late or ts <= row.start_ns + row.sync_ns + SAME_SYNC_NS):
                row.throttle(f)
                return
            if late:
                if row.pid == pid and row.txg < txg:
                    break
            elif row.start_ns + row.sync_ns < ts - SAME_SYNC_NS:
                break
        self._pending.setdefault((pool, pid, txg), []).append((ts, f))
        while len(self._pending) > PENDING:
            del self._pending[next(iter(self._pending))]

    def stats(self, pool: str, rows: list[TxgRow] | None = None) -> dict:
        """Sync time, interval, dirty data and throttle statistics over `rows` (default: the window)."""
        acc = TxgStats()
        acc.add_all(self.pools[pool].window() if rows is None else rows)
        return acc.result(pool, self.throttled)


class TxgStats:
    """TxgModel.stats over rows added in batches: a live window, or every txg of a capture as
    the model retires it (views/ledger.py). Percentiles are exact, so each row leaves its figures
    in compact arrays (8 bytes a number: 1 MiB a week at one txg per 5 s) and nothing else."""

    def __init__(self):
        self.n = 0
        self.sync, self.interval, self.dirty = array("q"), array("q"), array("q")
        self.seen = self.delayed = 0          # rows with a throttle line; of them, rows that delayed any
        self.sums = dict.fromkeys(("delay_count", "delay_ns", "txwait_count", "txwait_ns"), None)
        self.delay_max = self.dirty_max = None
        self.hist: list[int] | None = None
        self.dirty_pct = array("d")

    def add_all(self, rows) -> None:
        """Each of `rows`, a figure at a time over all of them: a live frame's minute is ~500 txgs
        of a busy pool, and a row at a time was most of its cost."""
        rows = list(rows)
        self.n += len(rows)
        self.sync.extend([r.sync_ns for r in rows])
        self.interval.extend([r.interval_ns for r in rows if r.interval_ns is not None])
        self.dirty.extend([r.dirty_bytes for r in rows if r.dirty_bytes is not None])
        rows = [r for r in rows if r.delay_count is not None]
        if not rows:
            return
        self.seen += len(rows)
        self.delayed += sum(1 for r in rows if r.delay_count)
        for name, total in self.sums.items():
            values = [v for v in (getattr(r, name) for r in rows) if v is not None]
            if values:
                self.sums[name] = sum(values) + (0 if total is None else total)
        hists = [r.delay_hist for r in rows if r.delay_hist is not None]
        if hists:
            self.hist = [sum(col) for col in zip(self.hist or [0] * DELAY_BUCKETS, *hists)]
        self.delay_max = _max(self.delay_max, (r.delay_max_ns for r in rows))
        self.dirty_max = _max(self.dirty_max, (r.dirty_max for r in rows))
        self.dirty_pct.extend([p for p in (r.dirty_pct for r in rows) if p is not None])

    def result(self, pool: str, throttled: bool) -> dict:
        return {"pool": pool, "txgs": self.n, "sync_ns": summary(self.sync), "interval_ns": summary(self.interval),
                "dirty_bytes": summary(self.dirty), "throttle": self._throttle() if throttled else None}

    def _throttle(self) -> dict:
        """The write throttle; a txg with no line had no transaction assigned or waiting while it
        was open: nothing delayed. A figure no line gave (kstat mode) is None."""
        def total(name: str):
            return 0 if not self.seen and self.sums[name] is None else self.sums[name]
        count, delay_ns = total("delay_count") or 0, total("delay_ns")
        return {"txgs": self.n, "txgs_delayed": self.delayed, "delay_count": count, "delay_ns": delay_ns,
                "delay_mean_ns": delay_ns / count if count and delay_ns is not None else None,
                "delay_max_ns": self.delay_max, "delay_hist": self.hist, "dirty_pct": summary(self.dirty_pct),
                "dirty_max": self.dirty_max, "txwait_count": total("txwait_count"), "txwait_ns": total("txwait_ns")}


def _max(old: int | None, values) -> int | None:
    """The largest of OLD and VALUES, None ones left out (None: none at all)."""
    return max((v for v in (old, *values) if v is not None), default=None)
