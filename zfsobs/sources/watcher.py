"""The tunable watcher: reads the tunables of zfsobs/targets/tunables.py at start and polls them, turning
each value it first sees and each change into a `tunable` event line (docs/events.md).

Linux kernel: /sys/module/zfs/parameters. Userland (libzpool, the lab): the globals inside the
newest process that maps the library, read from its memory (zfsobs/labs/procmem.py). A change is seen
at the poll after it happened: `since` is the previous poll, so it happened in (since, ts].
"""
from __future__ import annotations

import os
import time
from typing import Callable

from zfsobs.errors import ZfsobsError
from zfsobs.events import format_line
from zfsobs.labs.procmem import Gone, ProcessGlobals, load_base
from zfsobs.procs import scan
from zfsobs.targets.target import Target
from zfsobs.targets.tunables import TABLE

POLL_NS = 500_000_000
# A process younger than this may still be applying ztest's -o options (set_global_var after exec).
SETTLE_S = 1.0
RESCAN_S = 2.0
SYSFS = "/sys/module/zfs/parameters"


class SysfsReader:
    src = "sysfs"

    def __init__(self, root: str = SYSFS):
        self.root = root
        self.names = [t.name for t in TABLE if os.path.isfile(os.path.join(root, t.name))]

    def read(self) -> tuple[int, dict[str, int]] | None:
        values = {}
        for name in self.names:
            try:
                with open(os.path.join(self.root, name)) as f:
                    values[name] = int(f.read().strip())
            except (OSError, ValueError):
                continue
        return 0, values


def _started(pid: int) -> float:
    """Seconds since boot when the process started (/proc/PID/stat field 22)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")


def _uptime() -> float:
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def library_pids(path: str, only: Callable[[int], bool] | None, known: dict[int, tuple[float, bool]]) -> list[int]:
    """Processes that map the library (and pass `only`), oldest first. `known` keeps what a scan
    found per process (its start time and whether it maps the library), so the next scan reads no
    process's maps twice: ztest's run to hundreds of lines (most of a scan's time on the lab)."""
    started = {}
    uptime = _uptime()

    def maps_it(pid: int) -> bool:
        if only is not None and not only(pid):
            return False
        started[pid] = at = _started(pid)
        hit = known.get(pid)
        if hit is not None and hit[0] == at:      # the same process (a pid is reused with another start)
            return hit[1]
        try:
            load_base(pid, path)
            ok = True
        except (Gone, ZfsobsError):       # gone, or one we may not read: not ours to watch
            ok = False
        # a young process may not have mapped it yet (an exec in progress): asked again next time
        if ok or uptime - at >= SETTLE_S:
            known[pid] = (at, ok)
        return ok

    found = scan(maps_it)
    for pid in set(known) - set(started):
        del known[pid]
    return sorted(found, key=started.__getitem__)


class ProcessReader:
    """The newest settled process of the library: in the lab, the running ztest pass."""
    src = "mem"

    def __init__(self, target: Target, only: Callable[[int], bool] | None = None):
        self.target, self.only = target, only
        self.names = [t.name for t in TABLE if _is_global(target, t.name)]
        self.open: ProcessGlobals | None = None
        self.scanned = 0.0
        self.known: dict[int, tuple[float, bool]] = {}     # library_pids' findings, kept

    def read(self) -> tuple[int, dict[str, int]] | None:
        # /proc is scanned again only every RESCAN_S (no process's maps read twice); the open process is read
        # at every poll, and a new one is looked for at once when it ends
        if self.open is not None and time.monotonic() - self.scanned < RESCAN_S:
            try:
                return self.open.pid, {name: self.open.read(name) for name in self.names}
            except (Gone, OSError):
                pass
        self.scanned = time.monotonic()
        uptime = _uptime()
        for pid in reversed(library_pids(self.target.path, self.only, self.known)):
            try:
                if uptime - self.known[pid][0] < SETTLE_S:      # its start time, as the scan read it
                    continue
                if self.open is None or self.open.pid != pid:
                    self.close()        # before the next opens: one gone meanwhile leaves none open
                    self.open = ProcessGlobals(pid, self.target)
                return pid, {name: self.open.read(name) for name in self.names}
            except (Gone, OSError):
                continue
        return None

    def close(self) -> None:
        if self.open is not None:
            self.open.close()
            self.open = None


def _is_global(target: Target, name: str) -> bool:
    sym = target.symbols.get(name)
    return bool(sym and sym[0] == "data" and target.symbol_sizes.get(name) in (4, 8))


class Watcher:
    def __init__(self, reader, clock: Callable[[], int] = time.monotonic_ns):
        self.reader, self.clock = reader, clock
        self.values: dict[str, int] = {}
        self.last_poll: int | None = None

    @property
    def names(self) -> list[str]:
        return list(self.reader.names)

    def poll(self, force: bool = False) -> list[str]:
        now = self.clock()
        if not force and self.last_poll is not None and now - self.last_poll < POLL_NS:
            return []
        since, self.last_poll = self.last_poll, now
        got = self.reader.read()
        if got is None:
            return []
        pid, values = got
        lines = []
        for name, new in values.items():
            old = self.values.get(name)
            if old is None:
                lines.append(format_line("tunable", now, {"name": name, "old": None, "new": new, "pid": pid,
                                                          "src": self.reader.src, "initial": 1}))
            elif new != old:
                lines.append(format_line("tunable", now, {"name": name, "old": old, "new": new, "pid": pid,
                                                          "src": self.reader.src, "since": since}))
            self.values[name] = new
        return lines

    def close(self) -> None:
        getattr(self.reader, "close", lambda: None)()


def watcher_for(target: Target, only: Callable[[int], bool] | None = None) -> Watcher:
    """The kernel's module parameters, or the globals of the library's processes (`only`: which)."""
    if target.kind == "kernel":
        return Watcher(SysfsReader())
    return Watcher(ProcessReader(target, only))
