"""What tracing costs, measured while it runs: CPU time of zfsobs and of each probe's bpftrace, and
the BPF programs' own run time and run count (kept by the kernel when kernel.bpf_stats_enabled=1;
read from /proc/PID/fdinfo of bpftrace's program fds). The uprobe/kprobe trap itself is not in
the BPF run time: scripts/bench measures the whole cost as workload throughput.

Also the runs the kernel skipped (a program's recursion_misses: a trampoline or kprobe program
that fired on a CPU where it was already running, its thread preempted inside it), so that a
count short by them says so (`lost` events, cause=skipped). dtrace holds its programs through
link fds only: a program is then opened by its id to read its fdinfo."""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import time

TICK = os.sysconf("SC_CLK_TCK")
STATS_SWITCH = "/proc/sys/kernel/bpf_stats_enabled"
EVERY_S = 2.0
RESCAN_S = 30.0


def cpu_seconds(pid: int | str) -> float | None:
    """user + system CPU time of a process; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return None


_BPF_NR = {"x86_64": 321, "aarch64": 280}.get(platform.machine())
_PROG_GET_FD_BY_ID = 13


@functools.lru_cache(maxsize=1)
def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _fdinfo(path: str) -> dict[str, str]:
    with open(path) as f:
        return dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)


def _prog_info(prog_id: int) -> dict[str, str] | None:
    """A program's fdinfo, through an fd of our own (bpf(BPF_PROG_GET_FD_BY_ID): root)."""
    if _BPF_NR is None:
        return None
    attr = (ctypes.c_uint32 * 3)(prog_id, 0, 0)         # prog_id, next_id, open_flags
    fd = _libc().syscall(_BPF_NR, _PROG_GET_FD_BY_ID, ctypes.byref(attr), ctypes.sizeof(attr))
    if fd < 0:
        return None
    try:
        return _fdinfo(f"/proc/self/fdinfo/{fd}")
    except OSError:
        return None
    finally:
        os.close(fd)


def bpf_runs(pid: int, fds: set[str] | None = None) -> dict[int, tuple[int, int, int]]:
    """prog_id -> (run_time_ns, run_cnt, recursion_misses) of each BPF program process `pid` holds,
    through a program fd or a link fd. With `fds`, only those are read, and it is left holding the
    ones that were programs or links; an empty set is filled from all of the process's fds."""
    out = {}
    try:
        names = list(fds) if fds else os.listdir(f"/proc/{pid}/fdinfo")     # a copy: fds is refilled below
    except OSError:
        return out
    found = set()
    for fd in names:
        try:
            info = _fdinfo(f"/proc/{pid}/fdinfo/{fd}")
            prog = int(info["prog_id"])
            found.add(fd)
            if "run_cnt" not in info and prog not in out:     # a link: the program by its id
                info = _prog_info(prog) or {}
            out[prog] = (int(info["run_time_ns"]), int(info["run_cnt"]), int(info.get("recursion_misses", 0)))
        except (OSError, KeyError, ValueError):
            continue           # not a program (maps, perf events, pipes), or closed meanwhile
    if fds is not None:
        fds.clear()
        fds.update(found)
    return out


def stats_enabled() -> bool:
    try:
        with open(STATS_SWITCH) as f:
            return f.read().strip() not in ("", "0")
    except OSError:
        return False


class SelfCost:
    """Totals since start per probe and for zfsobs; `line()` is the header's rates over the last
    EVERY_S seconds or more."""

    def __init__(self, probes: dict[str, int], tracer: str = "bpftrace"):
        """Made once the probes are attached: their compile time is not what tracing costs.
        `tracer` names the probes' processes in the line (kstat mode: zpool iostat, no BPF)."""
        self.probes = dict(probes)        # probe name -> bpftrace pid
        self.tracer = tracer
        self.start = time.monotonic()
        self._seen: dict[str, dict] = {}  # the last reading of each probe and program: kept once gone
        self._own_cpu_s: float | None = None    # zfsobs's last reading (None: none yet)
        self._base = self._read()
        self._last = self._now()
        self._text = ""

    def _read(self) -> dict:
        """Totals now; a process whose /proc read fails keeps its last reading (a failed read is
        skipped, never taken for 0 s and subtracted), None until it has one."""
        cpu = cpu_seconds("self")
        if cpu is not None:
            self._own_cpu_s = cpu
        out = {"zfsobs_cpu_s": self._own_cpu_s}
        for name, pid in self.probes.items():
            cpu = cpu_seconds(pid)
            seen = self._seen.setdefault(name, {"cpu_s": None, "progs": {}})
            if cpu is not None:
                seen["cpu_s"] = cpu
                # per program: a tracer that is detaching has closed some of them already. Only the
                # fds that held programs are read again (a quarter of a bpftrace's fds; the rest are
                # maps and pipes), and all of them every RESCAN_S, in case it opened more
                fds = seen.setdefault("fds", set())
                if time.monotonic() - seen.get("scanned", 0.0) >= RESCAN_S:
                    fds.clear()
                    seen["scanned"] = time.monotonic()
                seen["progs"].update(bpf_runs(pid, fds))
            progs = seen["progs"].values()
            out[name] = {"cpu_s": seen["cpu_s"], "bpf_run_ns": sum(p[0] for p in progs),
                         "bpf_runs": sum(p[1] for p in progs), "bpf_skipped": sum(p[2] for p in progs)}
        return out

    def _now(self) -> dict:
        """Totals since the probes attached (since its first reading, for a process whose read
        failed then)."""
        now = self._read()
        out = {"t": time.monotonic(), "zfsobs_cpu_s": self._since(now, self._base, "zfsobs_cpu_s")}
        for name in self.probes:
            out[name] = {k: self._since(now[name], self._base[name], k) for k in now[name]}
        return out

    @staticmethod
    def _since(now: dict, base: dict, key: str) -> float:
        if base[key] is None:
            base[key] = now[key]
        return round(now[key] - base[key], 3) if now[key] is not None else 0.0

    def skipped(self) -> dict[str, int]:
        """Per probe, the runs of its programs the kernel skipped since they attached; a reading,
        kept for totals() once the tracers have exited."""
        now = self._read()
        return {name: now[name]["bpf_skipped"] - self._base[name]["bpf_skipped"] for name in self.probes}

    def totals(self) -> dict:
        """For the capture trailer: seconds traced, CPU seconds, BPF run time and count per probe."""
        now = self._now()
        now["seconds"] = round(now.pop("t") - self.start, 3)
        now["bpf_stats"] = stats_enabled()
        return now

    def line(self) -> str:
        if time.monotonic() - self._last["t"] >= EVERY_S:
            now = self._now()
            self._text = self._describe(self._last, now)
            self._last = now
        return self._text

    def _describe(self, a: dict, b: dict) -> str:
        span = max(1e-9, b["t"] - a["t"])
        share = lambda key: 100 * (b[key] - a[key]) / span    # noqa: E731 - % of one CPU
        tracer = sum(b[n]["cpu_s"] - a[n]["cpu_s"] for n in self.probes) / span * 100
        text = f"cost: zfsobs {share('zfsobs_cpu_s'):.1f}% · {self.tracer} {tracer:.1f}% of a CPU"
        if self.tracer not in ("bpftrace", "dtrace"):
            return text
        if not stats_enabled():
            return text + " · BPF run time off (sysctl kernel.bpf_stats_enabled=1)"
        ns = sum(b[n]["bpf_run_ns"] - a[n]["bpf_run_ns"] for n in self.probes)
        runs = sum(b[n]["bpf_runs"] - a[n]["bpf_runs"] for n in self.probes)
        per = f"{ns / runs:.0f} ns × {runs / span:,.0f}/s" if runs else "no runs"
        return text + f" · BPF {per} = {ns / span / 1e7:.2f}% (traps not included)"
