"""throttle.bt's late lines (docs/events.md, txg_thr): a count that reached a txg after its line was
printed comes at the next sync as late=1 with what that line missed. The model adds it to the txg's
own row whichever of the two is read first, and keeps the tunables of the txg's own line."""
from __future__ import annotations

from zfsobs.events import Event
from zfsobs.model import Model

SEC = 10**9
TUN = {"dirty_data_max": 4 << 30, "delay_min_pct": 60, "delay_scale": 500000}


def thr(t: float, txg: int, delays: int, delay_ns: int, late: int = 0, **tun) -> Event:
    return Event("txg_thr", int(t * SEC), {"pool": "p", "pid": 9, "txg": txg, "late": late, "dirty_max": 1 << 30,
                                           "delays": delays, "delay_ns": delay_ns, "delay_max_ns": delay_ns,
                                           "d0": 0, "d1": 0, "d2": 0, "d3": delays, "d4": 0, "d5": 0,
                                           "waits": 0, "wait_ns": 0, **(tun or TUN)})


def txg(t: float, n: int) -> Event:
    return Event("txg", int(t * SEC), {"pool": "p", "pid": 9, "txg": n, "start": int(t * SEC) - SEC // 10,
                                       "sync_ns": SEC // 10})


def test_a_late_line_adds_to_its_own_txgs_row_read_before_or_after_it():
    other_tun = {**TUN, "dirty_data_max": 1 << 30}
    for order in ("row first", "late first"):
        m = Model(keep=None)
        events = [thr(4.9, 7, 3, 3_000_000), txg(5.0, 7), thr(9.9, 8, 1, 1_000_000)]
        late = thr(9.9, 7, 1, 2_000_000, late=1, **other_tun)      # at txg 8's sync, 5 s on
        rows_at = txg(10.0, 8)
        seq = events[:2] + [late] + events[2:] + [rows_at] if order == "row first" else \
            [events[0], late, events[1], events[2], rows_at]
        for ev in seq:
            m.feed(ev)
        rows = {r.txg: r for r in m.txg.pools["p"].rows}
        assert (rows[7].delay_count, rows[7].delay_ns, rows[7].delay_hist[3]) == (4, 5_000_000, 4), order
        assert rows[7].dirty_data_max == TUN["dirty_data_max"], order      # its own line's, not txg 8's
        assert (rows[8].delay_count, rows[8].delay_ns) == (1, 1_000_000), order
        # Prometheus's run totals add every line: the late one's is what the first missed
        assert (m.counters.throttle["p"]["delays"], m.counters.throttle["p"]["delay_ns"]) == (5, 6_000_000), order
