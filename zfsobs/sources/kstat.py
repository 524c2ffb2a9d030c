"""The kstat source: what ZFS's own counters show, without root and without BPF. Read once a second:
the per-pool txgs kstat (every synced txg, exactly as ZFS timed it), the global zil and
vdev_cache_stats kstats (as per-second deltas), and `zpool iostat -q` sampled (zfsobs/sources/kstat_queue.py).
It emits the probes' event lines (docs/events.md), so capture, replay, report and the views work
unchanged. Each hello line's `na` lists the fields this source cannot give; views show them as
unavailable, never as zero (docs/kstat.md)."""
from __future__ import annotations

import os
import platform
import time

from zfsobs import __version__
from zfsobs.sources import kstats
from zfsobs.errors import ZfsobsError
from zfsobs.events import format_line
from zfsobs.sources.kstat_queue import NA as VQ_NA
from zfsobs.sources.kstat_queue import SAMPLE_S, QueueSampler
from zfsobs.signals import stop_pending
from zfsobs.sources.stopping import Stopping
from zfsobs.targets.target import Target

READ_NS = 10**9
ZIL_NA = ("lat_ns", "lat_max_ns", "lat_hist", "itxs", "itx_bytes", "writes", "write_bytes", "size",
          "lwb_le4k", "lwb_4to32k", "lwb_ge32k", "tx")
# the dmu_tx kstat counts throttled transactions, not their time, nor dirty data per txg
THR_NA = ("delay_ns", "dirty_max", "dirty_pct", "delay_mean_ns", "delay_max_ns", "delay_hist", "txwait_count",
          "txwait_ns")
VC_NA = ("reads", "read_bytes", "hit_bytes", "miss_bytes", "declined", "declined_bytes")
ALL_POOLS = "*"      # a global kstat (zil, vdev_cache_stats) while several pools are imported


def _raw_to_mono(tries: int = 8) -> int:
    """What to add to a kstat time (gethrtime(): CLOCK_MONOTONIC_RAW) to get CLOCK_MONOTONIC. The
    monotonic read is bracketed by two raw ones and the closest pair wins: a preemption between two
    reads (4 ms seen beside a CPU hog) would otherwise shift every time of that poll."""
    best = None
    for _ in range(tries):
        r1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)
        mono = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        r2 = time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)
        if best is None or r2 - r1 < best[0]:
            best = (r2 - r1, mono - (r1 + r2) // 2)
    return best[1]


class KstatSource(Stopping):
    tracer = "zpool iostat"      # the one helper process (selfcost measures it)

    def __init__(self, target: Target, probes=("txg", "zil", "vdev_queue", "vdev_cache", "throttle"),
                 tunables: dict | None = None, pools=None, why: str = ""):
        if target.kind != "kernel":
            raise ZfsobsError("kstat mode reads the zfs kernel module's kstats; the userland lab (libzpool) "
                              "has none: trace it as root instead (--source trace)")
        unusable = kstats.unusable()
        if unusable:
            raise ZfsobsError(unusable)
        self.target, self.pools = target, list(pools or [])
        self.unavailable: dict[str, str] = {}
        self.queue = QueueSampler(self.pools) if "vdev_queue" in probes else None
        if self.queue is not None and not self.queue.zpool:
            self.unavailable["vdev_queue"] = "no zpool command for `zpool iostat -q`"
            self.queue = None
        self.zil = "zil" in probes and os.path.exists(f"{kstats.KSTAT}/zil")
        self.vc = "vdev_cache" in probes and os.path.exists(f"{kstats.KSTAT}/vdev_cache_stats")
        if "vdev_cache" in probes and not self.vc:
            self.unavailable["vdev_cache"] = "no vdev_cache_stats kstat (OpenZFS >= 2.2 removed the vdev cache)"
        self.throttle = "throttle" in probes and os.path.exists(f"{kstats.KSTAT}/dmu_tx")
        self.names = (["txg"] + ["zil"] * self.zil + ["vdev_queue"] * bool(self.queue) + ["vdev_cache"] * self.vc
                      + ["throttle"] * self.throttle)
        self.meta = {
            "zfsobs": __version__, "host": platform.node(), "kernel": platform.release(), "source": "kstat",
            "kstat": {"why": why, "read_s": READ_NS / 1e9, "queue_sample_s": SAMPLE_S},
            "target": target.describe(), "probes": {n: {"src": "kstat"} for n in self.names},
            "unavailable": dict(self.unavailable), "tunables": dict(tunables or {}),
            "start_wall_ns": time.time_ns(), "start_mono_ns": time.monotonic_ns(),
        }
        self.ended, self.dropped_at_stop, self.attached = "", 0, False
        self._next = 0
        self._txg_last: dict[str, int] = {}        # pool -> the last txg emitted
        self._txg_start: dict[str, int] = {}       # pool -> its sync start (for interval_ns)
        self._zil_base = self._vc_base = self._thr_base = None
        self._zil_rows: dict[tuple[str, int], dict] = {}
        self._zil_open: dict[str, int] = {}
        self._vc_last: dict | None = None

    @property
    def pids(self) -> dict[str, int]:
        return {"vdev_queue": self.queue.proc.pid} if self.queue and self.queue.proc else {}

    def start(self) -> "KstatSource":
        self._t0_raw = time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)
        self._zil_base = kstats.counters("zil") if self.zil else None
        self._vc_base = kstats.counters("vdev_cache_stats") if self.vc else None
        self._thr_base = kstats.counters("dmu_tx") if self.throttle else None
        if self.queue is not None:
            self.queue.start()
        return self

    def poll(self, timeout: float) -> list[str]:
        lines = []
        if not self.attached:
            self.attached = True
            na = {"zil": ZIL_NA, "vdev_queue": VQ_NA, "vdev_cache": VC_NA, "throttle": THR_NA}
            now = time.monotonic_ns()
            lines += [format_line("hello", now, {"probe": n, "target": "kernel", "src": "kstat",
                                                 **({"na": ",".join(na[n])} if n in na else {})}) for n in self.names]
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic_ns() >= self._next:
                self._next = time.monotonic_ns() + READ_NS
                lines += self._read()
            if self.queue is not None:
                lines += self.queue.lines()
                if self.queue.error and not self.ended:
                    self.ended = self.queue.error
            left = deadline - time.monotonic()
            if lines or left <= 0 or stop_pending():
                return lines
            time.sleep(min(left, 0.05, max(0.0, (self._next - time.monotonic_ns()) / 1e9)))

    def _read(self) -> list[str]:
        pools = [p for p in kstats.pools() if not self.pools or p in self.pools]
        offset, lines, opened = _raw_to_mono(), [], {}
        for pool in pools:
            rows = kstats.txgs(kstats.read(f"{kstats.KSTAT}/{pool}/txgs") or "")
            opened[pool] = max((t for t, r in rows.items() if r["state"] == "O"), default=None)
            lines += self._txgs(pool, rows, offset)
        if self.zil:
            lines += self._zil(pools, opened)
        if self.vc:
            lines += self._vdev_cache(pools)
        if self.throttle:
            lines += self._throttle(pools, opened)
        return lines

    def _txgs(self, pool: str, rows: dict, offset: int) -> list[str]:
        """Each txg synced since the last read (and since the session began): the kstat's own
        numbers. Its times are completion times: WAIT_FOR_SYNC's is where spa_sync() begins."""
        out, last = [], self._txg_last.get(pool)
        done = sorted(t for t, r in rows.items() if r["state"] == "C" and (last is None or t > last))
        if last is not None and done and done[0] > last + 1:
            out.append(format_line("lost", time.monotonic_ns(), {"count": done[0] - last - 1, "probe": "txg"}))
        for t in done:
            r = rows[t]
            start_raw = r["birth"] + r["otime"] + r["qtime"] + r["wtime"]
            if start_raw + r["stime"] < self._t0_raw:
                continue                          # synced before the session began
            start = start_raw + offset
            prev = self._txg_start.get(pool)
            out.append(format_line("txg", start + r["stime"], {
                "pool": pool, "pid": 0, "txg": t, "start": start, "sync_ns": r["stime"],
                "interval_ns": start - prev if prev is not None else None, "dirty": r["ndirty"],
                "open_ns": r["otime"], "quiesce_ns": r["qtime"], "wait_ns": r["wtime"], "stime_ns": r["stime"],
                "nread": r["nread"], "nwritten": r["nwritten"], "reads": r["reads"], "writes": r["writes"]}))
            self._txg_start[pool] = start
        if done:
            self._txg_last[pool] = done[-1]
        return out

    def _zil(self, pools: list[str], opened: dict) -> list[str]:
        """The global zil kstat's change since the session began, as per-txg rows: what a second
        brought goes to the txg open at its end. One pool imported: that pool; several: `*`, txg 0
        (the kstat does not say which pool a commit was for)."""
        self._zil_base, d = kstats.change("zil", self._zil_base)
        if not pools:
            return []
        pool, txg = (pools[0], opened.get(pools[0])) if len(pools) == 1 else (ALL_POOLS, 0)
        if txg is None:
            return []
        ts, out = time.monotonic_ns(), []
        before = self._zil_open.get(pool)
        if before is not None and before != txg and (pool, before) in self._zil_rows:
            out.append(self._zil_line(ts, pool, before, final=1))
            del self._zil_rows[(pool, before)]
        self._zil_open[pool] = txg
        delta = {
            "commits": d.get("zil_commit_count", 0),
            "lwbs": d.get("zil_itx_metaslab_normal_count", 0) + d.get("zil_itx_metaslab_slog_count", 0),
            "nused": d.get("zil_itx_metaslab_normal_bytes", 0) + d.get("zil_itx_metaslab_slog_bytes", 0),
            "slog_lwbs": d.get("zil_itx_metaslab_slog_count", 0),
            "slog_nused": d.get("zil_itx_metaslab_slog_bytes", 0),
            **{k: d.get(f"zil_itx_{k}_count", 0) for k in ("copied", "needcopy", "indirect")},
            **{f"{k}_bytes": d.get(f"zil_itx_{k}_bytes", 0) for k in ("copied", "needcopy", "indirect")},
        }
        if any(delta.values()):
            row = self._zil_rows.setdefault((pool, txg), dict.fromkeys(delta, 0))
            for k, v in delta.items():
                row[k] += v
            out.append(self._zil_line(ts, pool, txg, final=0))
        return out

    def _zil_line(self, ts: int, pool: str, txg: int, final: int) -> str:
        return format_line("zil", ts, {"pool": pool, "pid": 0, "txg": txg, "cpu": 0, "final": final,
                                       **self._zil_rows[(pool, txg)]})

    def _throttle(self, pools: list[str], opened: dict) -> list[str]:
        """The global dmu_tx kstat's throttled transactions of a second, as a txg_thr line of the txg
        open at its end (a txg's lines add up), like the ZIL's; several pools: `*`, txg 0."""
        self._thr_base, d = kstats.change("dmu_tx", self._thr_base)
        delays = d.get("dmu_tx_dirty_delay", 0) + d.get("dmu_tx_wrlog_delay", 0)
        over = d.get("dmu_tx_dirty_over_max", 0)
        if not pools or not (delays or over):
            return []
        pool, txg = (pools[0], opened.get(pools[0])) if len(pools) == 1 else (ALL_POOLS, 0)
        if txg is None:
            return []
        return [format_line("txg_thr", time.monotonic_ns(), {
            "pool": pool, "pid": 0, "txg": txg, "delays": delays, "over_max": over,
            "dirty_data_max": kstats.param("zfs_dirty_data_max"),
            "delay_min_pct": kstats.param("zfs_delay_min_dirty_percent"),
            "delay_scale": kstats.param("zfs_delay_scale"), "delay_ns": None})]

    def _vdev_cache(self, pools: list[str]) -> list[str]:
        """vdev_cache_stats since the session began, one line when it or the tunables change. A
        delegated read waited for a fill in flight: a hit to the reader (the probe counts it so)."""
        _, d = kstats.change("vdev_cache_stats", self._vc_base)       # since the session began
        bshift = kstats.param("zfs_vdev_cache_bshift") or 16
        fields = {"pool": pools[0] if len(pools) == 1 else ALL_POOLS, "pid": 0, "vd": "all", "final": 0,
                  "hits": d.get("hits", 0) + d.get("delegations", 0), "misses": d.get("misses", 0),
                  "fill_bytes": d.get("misses", 0) << bshift, "size": kstats.param("zfs_vdev_cache_size") or 0,
                  "max": kstats.param("zfs_vdev_cache_max"), "bshift": bshift, "path": "all"}
        if fields == self._vc_last:
            return []
        self._vc_last = fields
        return [format_line("vc", time.monotonic_ns(), fields)]

    def finish(self) -> list[str]:
        """A last read, and every open ZIL row as final; the stop hook runs after the read (as
        bpftrace's after its stop)."""
        lines = self._read()
        self._stopped()
        if self.queue is not None:
            lines += self.queue.lines()
        ts = time.monotonic_ns()
        lines += [self._zil_line(ts, pool, txg, final=1) for pool, txg in list(self._zil_rows)]
        self._zil_rows.clear()
        return lines

    def close(self) -> None:
        if self.queue is not None:
            self.queue.close()
