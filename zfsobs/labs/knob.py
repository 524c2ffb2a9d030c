"""`zfsobs lab set NAME=VALUE`: change a tunable inside a running userland lab, the lab's
`echo NAME/W VALUE | mdb -kw`. Never used on a real system: it only finds zfsobs's own ztest runs.

ztest runs each pass as a fresh child process that takes its `-o NAME=VALUE` options from a shared
options file (ztest_shared_opts_t, mmap()ed by the parent and every pass). So a change goes to both:
the running pass's memory (the effect now) and the options file (the next passes keep it).
"""
from __future__ import annotations

import difflib
import os
import struct
import time

from zfsobs.errors import ZfsobsError
from zfsobs.labs.userland import BUILDS
from zfsobs.labs.procmem import Gone, ProcessGlobals, mapped_library
from zfsobs.procs import exe, in_group, scan
from zfsobs.targets.target import Target, libzpool
from zfsobs.targets.tunables import BY_NAME

POOL_PREFIX = "zfsobs_lab_"
GVARS_COUNT, GVARS_LEN = 10, 64        # ZO_GVARS_MAX_COUNT, ZO_GVARS_MAX_ARGLEN in ztest.c
# zo_gvars is the last member of ztest_shared_opts_t, preceded by int zo_gvars_count; whether the
# struct ends with 4 bytes of padding depends on the members before it (2.1.11: none, 2.3.2: 4;
# both measured on a running lab).
GVARS_TAIL = {"2.1": GVARS_COUNT * GVARS_LEN, "2.3": GVARS_COUNT * GVARS_LEN + 4}


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().decode(errors="replace").split("\0")[:-1]


def _owner(pid: int) -> int:
    return os.stat(f"/proc/{pid}").st_uid


def _lab_parents() -> dict[int, str]:
    """pid -> pool of each running lab's ztest parent (a ztest of ours whose pool is a lab's, run by
    this user: root's `lab set` never writes into another user's process)."""
    ztests = {os.path.realpath(b.ztest) for b in BUILDS.values()}
    found = {}
    for pid in scan(lambda p: exe(p) in ztests and os.getpgid(p) == p and _owner(p) == os.geteuid()):
        try:
            args = _cmdline(pid)
        except OSError:
            continue
        pool = args[args.index("-p") + 1] if "-p" in args[:-1] else ""
        if pool.startswith(POOL_PREFIX):
            found[pid] = pool
    return found


def find_lab(pid: int | None = None) -> int:
    labs = _lab_parents()
    if pid is not None:
        if pid not in labs:
            raise ZfsobsError(f"--pid {pid}: not a running lab's ztest (running labs: "
                              f"{', '.join(map(str, labs)) or 'none'})")
        return pid
    if not labs:
        raise ZfsobsError("no running lab: start one with `zfsobs top --lab` or `zfsobs lab`")
    if len(labs) > 1:
        raise ZfsobsError(f"{len(labs)} labs are running (ztest pids {', '.join(map(str, sorted(labs)))}): "
                          "choose one with --pid")
    return next(iter(labs))


def _pass_pids(parent: int) -> list[int]:
    """The lab's ztest processes: the parent and its running pass (not zdb)."""
    program = exe(parent)
    return scan(lambda p: in_group(p, parent, program))


def parse_assignment(text: str, target: Target) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise ZfsobsError(f"lab set {text!r}: expected NAME=VALUE")
    try:
        number = int(value, 0)
    except ValueError:
        raise ZfsobsError(f"lab set {text!r}: the value must be an integer") from None
    sym = target.symbols.get(name)
    if not sym or sym[0] != "data" or target.symbol_sizes.get(name) not in (4, 8):
        if name in BY_NAME:
            raise ZfsobsError(f"{name}: this libzpool ({target.version}) does not export it (a static "
                              "variable since 2.2), so neither lab set nor ztest -o can reach it")
        candidates = set(BY_NAME) | {n for n, s in target.symbols.items() if s[0] == "data"}
        close = difflib.get_close_matches(name, sorted(candidates), 3)
        raise ZfsobsError(f"{name}: not a tunable this libzpool ({target.version}) exports"
                          + (f"; did you mean {', '.join(close)}?" if close else ""))
    if not 0 <= number < 1 << 32:    # ztest passes -o values through a 32-bit parse
        raise ZfsobsError(f"lab set {text!r}: ztest takes tunables as 32-bit unsigned values")
    return name, number


class OptionsFile:
    """The gvars (NAME=VALUE strings) in ztest's shared options file, via the parent's open fd."""

    def __init__(self, path: str, zfs: str):
        self.f = open(path, "r+b", buffering=0)
        hdr_size, opts_size = struct.unpack("<QQ", os.pread(self.f.fileno(), 16, 0))
        self.gvars = hdr_size + opts_size - GVARS_TAIL[zfs]
        self.count_at = self.gvars - 4

    @classmethod
    def of(cls, parent: int, zfs: str) -> "OptionsFile":
        """The file ztest's parent made (unlinked; its fd is the way in)."""
        fd_dir = f"/proc/{parent}/fd"
        path = next((os.path.join(fd_dir, fd) for fd in os.listdir(fd_dir)
                     if os.readlink(os.path.join(fd_dir, fd)).startswith("/tmp/ztest.data.")), None)
        if path is None:
            raise ZfsobsError(f"ztest {parent}: its shared options file is not open (not a ztest parent?)")
        return cls(path, zfs)

    def entries(self) -> list[str]:
        count = struct.unpack("<i", os.pread(self.f.fileno(), 4, self.count_at))[0]
        if not 0 <= count <= GVARS_COUNT:
            raise ZfsobsError(f"ztest's options file does not look like this ztest's (gvars count {count})")
        raw = os.pread(self.f.fileno(), GVARS_LEN * count, self.gvars)
        out = [raw[i * GVARS_LEN:(i + 1) * GVARS_LEN].split(b"\0")[0].decode() for i in range(count)]
        if any("=" not in e for e in out):
            raise ZfsobsError("ztest's options file does not look like this ztest's (an option without '=')")
        return out

    def set(self, name: str, value: int) -> None:
        entries = self.entries()
        index = next((i for i, e in enumerate(entries) if e.partition("=")[0] == name), len(entries))
        if index >= GVARS_COUNT:
            raise ZfsobsError(f"ztest holds at most {GVARS_COUNT} -o options; this lab has them all")
        text = f"{name}={value}".encode()
        os.pwrite(self.f.fileno(), text.ljust(GVARS_LEN, b"\0"), self.gvars + index * GVARS_LEN)
        if index == len(entries):      # the entry first, then the count a new pass reads it by
            os.pwrite(self.f.fileno(), struct.pack("<i", index + 1), self.count_at)

    def close(self) -> None:
        self.f.close()


def lab_set(assignment: str, pid: int | None = None) -> str:
    """Set NAME=VALUE in the lab; returns what was done (one line)."""
    parent = find_lab(pid)
    target = libzpool(mapped_library(parent))
    name, value = parse_assignment(assignment, target)
    zfs = ".".join(target.version.split(".")[:2])
    if zfs not in GVARS_TAIL:
        raise ZfsobsError(f"lab set does not know ztest {target.version}'s options layout")
    opts = OptionsFile.of(parent, zfs)
    try:
        opts.set(name, value)       # first: a pass starting now reads the new value
    finally:
        opts.close()
    old, written = None, []
    # a pass that started just before the options write may still apply the old value: check twice
    for attempt in range(3):
        for p in _pass_pids(parent):
            try:
                with ProcessGlobals(p, target, write=True) as g:
                    current = g.read(name)
                    if current != value:
                        old = current if old is None and p != parent else old
                        g.write(name, value)
                        written.append(p)
            except Gone:
                continue
        time.sleep(0.2 if attempt < 2 else 0)
    warning = ""
    t = BY_NAME.get(name)
    if name.endswith("_max_active"):
        low = name.replace("_max_active", "_min_active")
        if low in target.symbols:
            with ProcessGlobals(parent, target) as g:
                minimum = g.read(low)
            if value < minimum:
                warning = (f"; warning: below {low}={minimum}: ZFS assumes min <= max, so this class "
                           "can exceed max_active (async writes interpolate between them)")
    return (f"lab {parent}: {name} {'?' if old is None else old} -> {value} "
            f"(ztest pids {', '.join(map(str, sorted(set(written)))) or 'none needed'}; later passes too)"
            + (f" [{t.metric}]" if t else "") + warning)
