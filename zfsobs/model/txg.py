"""txg sync state per pool: the recent txgs and statistics over a time window."""
from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass

from zfsobs.events import Event
from zfsobs.model.stats import summary

WINDOW_NS = 60 * 10**9     # statistics cover the last minute of syncs
KEEP = 5000                # rows kept per pool in live/replay (report keeps all)


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

    def as_dict(self) -> dict:
        return asdict(self)


class PoolTxgs:
    def __init__(self, keep: int | None):
        self.rows: deque[TxgRow] = deque(maxlen=keep)
        self.total = 0

    def window(self, span_ns: int = WINDOW_NS) -> list[TxgRow]:
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
    kinds = ("txg",)

    def __init__(self, keep: int | None = KEEP):
        self.keep = keep
        self.pools: dict[str, PoolTxgs] = {}

    def feed(self, ev: Event) -> None:
        f = ev.fields
        pool = str(f["pool"])
        row = TxgRow(pool, int(f.get("pid") or 0), int(f["txg"]), int(f["start"]), int(f["sync_ns"]),
                     f.get("interval_ns"), f.get("dirty"), f.get("open_ns"), f.get("quiesce_ns"),
                     f.get("wait_ns"), f.get("stime_ns"))
        state = self.pools.get(pool)
        if state is None:
            state = self.pools[pool] = PoolTxgs(self.keep)
        state.rows.append(row)
        state.total += 1

    def stats(self, pool: str, rows: list[TxgRow] | None = None) -> dict:
        """Sync time, interval and dirty-data statistics over `rows` (default: the window)."""
        if rows is None:
            rows = self.pools[pool].window()
        return {
            "pool": pool,
            "txgs": len(rows),
            "sync_ns": summary([r.sync_ns for r in rows]),
            "interval_ns": summary([r.interval_ns for r in rows if r.interval_ns is not None]),
            "dirty_bytes": summary([r.dirty_bytes for r in rows if r.dirty_bytes is not None]),
        }
