"""Queue depth without tracing: `zpool iostat -q` sampled five times a second, turned into the
vdev_queue probe's `vq` / `vq_vdev` lines (docs/events.md). Each sample is one instant's pending
and active count per leaf vdev and class; between samples the depth is taken as constant, so the
time integrals (pend_ns, act_ns), and the means a view makes of them, are sampled estimates, and
the maxima are the highest sampled. What only tracing can see (I/Os enqueued, issued, merged,
completed, wait and device times) is not in these lines: the hello line's `na` says so."""
from __future__ import annotations

import subprocess
import threading
import time
from collections import deque

from zfsobs.sources import kstats
from zfsobs.events import format_line
from zfsobs.procs import die_with_parent, stop
from zfsobs.signals import whole

SAMPLE_S = 0.2
FLUSH_NS = 10**9
NA = ("enq", "enq_bytes", "issued", "merged", "aggs", "done", "done_bytes", "wait_ns", "dev_ns",
      "untracked", "untracked_act", "unseen", "vq_lat")


class QueueSampler:
    def __init__(self, pools: list[str]):
        self.zpool = kstats.zpool()
        self.pools = list(pools)
        self.proc: subprocess.Popen | None = None
        self._blocks: deque = deque()        # no lock for a stop signal to cut (zfsobs/sources/bpftrace.py)
        self._series: dict[tuple, dict] = {}     # (pool, path, class) -> depth state
        self._vdevs: set[tuple[str, str]] = set()
        self._flushed = 0
        self.error = ""

    def start(self) -> None:
        # -P: leaves by path (as vdev_path in the probes' lines); -y: no since-boot report;
        # -T u: a timestamp line starts each sample, which is how samples are told apart
        cmd = [self.zpool, "iostat", "-q", "-v", "-H", "-p", "-P", "-y", "-T", "u", *self.pools, str(SAMPLE_S)]
        with whole():      # a Ctrl-C inside Popen would leave a zpool that close() never sees
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                         text=True, bufsize=1, preexec_fn=die_with_parent, start_new_session=True)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        block: list[str] = []
        for line in self.proc.stdout:
            if line.strip().isdigit():          # the next sample begins: the last one is whole
                if block:
                    self._blocks.append((time.monotonic_ns(), block))
                block = []
            else:
                block.append(line)
        if block:
            self._blocks.append((time.monotonic_ns(), block))
        err = self.proc.stderr.read().strip().splitlines() if self.proc.stderr else []
        self.error = f"zpool iostat exited ({err[-1] if err else self.proc.wait()})"

    def lines(self) -> list[str]:
        """The vq lines due now: samples are integrated as they come, lines flushed once a second."""
        out = []
        while True:
            try:
                ts, block = self._blocks.popleft()
            except IndexError:
                break
            self._sample(ts, block)
            if ts - self._flushed >= FLUSH_NS:
                out += self._flush(ts)
                self._flushed = ts
        return out

    def _sample(self, ts: int, block: list[str]) -> None:
        pool, known = None, set(self.pools or kstats.pools())
        for line in block:
            row = kstats.iostat_q_row(line)
            if row is None:
                continue
            name, classes = row
            if name in known:                    # a pool's own line: its leaves follow
                pool = name
                continue
            if not name.startswith("/"):         # mirror-0, raidz1-0, ...: not a leaf
                continue
            for cls, (pend, act) in classes.items():
                s = self._series.setdefault((pool, name, cls), {
                    "ts": ts, "pend": pend, "act": act, "pend_ns": 0, "act_ns": 0, "pend_max": pend,
                    "act_max": act, "changed": True})
                dt = ts - s["ts"]
                s["pend_ns"] += s["pend"] * dt
                s["act_ns"] += s["act"] * dt
                s["changed"] |= s["pend"] != pend or s["act"] != act or pend > 0 or act > 0
                s.update(ts=ts, pend=pend, act=act, pend_max=max(s["pend_max"], pend), act_max=max(s["act_max"], act))

    def _flush(self, ts: int) -> list[str]:
        """A line per series that moved since its last line (an idle series needs none: its depth,
        0, carries on in the model), and a vq_vdev line the first time a leaf is seen."""
        out, limits = [], {}
        vdev_max = kstats.param("zfs_vdev_max_active")
        for (pool, path, cls), s in sorted(self._series.items(), key=lambda kv: (str(kv[0][0]), kv[0][1], kv[0][2])):
            if pool is None or not s["changed"]:
                continue
            if (pool, path) not in self._vdevs:
                self._vdevs.add((pool, path))
                out.append(format_line("vq_vdev", ts, {"pool": pool, "pid": 0, "vd": path, "final": 0,
                                                       "vdev_max": vdev_max, "path": path}))
            if cls not in limits:
                name = kstats.CLASS_PARAMS[cls]
                limits[cls] = (kstats.param(f"zfs_vdev_{name}_max_active"), kstats.param(f"zfs_vdev_{name}_min_active"))
            # the integrals up to the flush, at the depth of the last sample
            pend_ns, act_ns = s["pend_ns"] + s["pend"] * (ts - s["ts"]), s["act_ns"] + s["act"] * (ts - s["ts"])
            out.append(format_line("vq", ts, {
                "pool": pool, "pid": 0, "vd": path, "class": cls, "final": 0, "pend": s["pend"], "act": s["act"],
                "pend_ns": pend_ns, "act_ns": act_ns, "pend_max": s["pend_max"], "act_max": s["act_max"],
                "max_active": limits[cls][0], "min_active": limits[cls][1]}))
            s.update(pend_max=s["pend"], act_max=s["act"], changed=s["pend"] > 0 or s["act"] > 0)
        return out

    def close(self) -> None:
        if self.proc is not None:
            stop(self.proc, 5)
