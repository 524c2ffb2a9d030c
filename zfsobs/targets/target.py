"""What can be traced here: a libzpool library (userland ZFS, e.g. ztest) or the zfs kernel module.

A Target knows its ZFS version and build identity, which functions it exports, and how a probe
script is attached to it (uprobe on a path, or kprobe). It never knows what a probe measures.
"""
from __future__ import annotations

import glob
import os
import platform
import re
import struct
import subprocess
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

from zfsobs.errors import ZfsobsError
from zfsobs.targets.names import LIBRARY_CHARS, LIBRARY_PATH_RE, library_path
from zfsobs.targets.probe_files import offsets_table
from zfsobs.targets.platforms import uses_dtrace

LIB_GLOBS = ("/lib/x86_64-linux-gnu/libzpool.so.*", "/usr/lib/x86_64-linux-gnu/libzpool.so.*",
             "/usr/lib/libzpool.so.*", "/usr/local/lib/libzpool.so.*", "/lib64/libzpool.so.*")
_VERSION_RE = re.compile(rb"zfs-(\d+\.\d+\.\d+)")
_BUILD_ID_NOTE = struct.pack("<III4s", 4, 20, 3, b"GNU\0")


@dataclass
class Target:
    kind: str                      # "libzpool" or "kernel"
    path: str = ""                 # the library (libzpool) or "" (kernel)
    version: str = "unknown"       # OpenZFS release, e.g. "2.1.11"
    build_id: str = ""
    btf: bool = False              # kernel module BTF present
    notes: list[str] = field(default_factory=list)
    layouts: str = ""              # kernel: where its struct layouts came from, or why there are none

    @property
    def name(self) -> str:
        return f"{self.kind} {self.version}" + (f" ({self.path})" if self.path else "")

    def describe(self) -> dict:
        out = {"kind": self.kind, "path": self.path, "zfs_version": self.version,
               "build_id": self.build_id, "btf": self.btf}
        return {**out, "layouts": self.layouts} if self.layouts else out

    # How a probe attaches here (used by render.render): only a whitelisted path goes in.
    def entry(self, fn: str) -> str:
        return f"uprobe:{self._script_path()}:{fn}" if self.kind == "libzpool" else f"kprobe:{fn}"

    def ret(self, fn: str) -> str:
        return f"uretprobe:{self._script_path()}:{fn}" if self.kind == "libzpool" else f"kretprobe:{fn}"

    def _script_path(self) -> str:
        if not LIBRARY_PATH_RE.fullmatch(self.path):
            raise ZfsobsError(f"library path {self.path!r}: a probe script takes only {LIBRARY_CHARS}")
        return self.path

    @property
    def proc(self) -> str:
        """Process id to key state by: ztest processes are separate pools' worlds; the kernel is one."""
        return "pid" if self.kind == "libzpool" else "0"

    @cached_property
    def functions(self) -> frozenset[str]:
        return frozenset(n for n, (kind, _) in self.symbols.items() if kind == "func")

    @cached_property
    def symbols(self) -> dict[str, tuple[str, int]]:
        """name -> ("func" | "data", address): libzpool's exported symbols (file addresses), or the
        zfs module's from kallsyms (run-time addresses; a function inlined everywhere is not there)."""
        return _exported_symbols(self.path) if self.kind == "libzpool" else _kernel_symbols()

    @property
    def symbol_sizes(self) -> dict[str, int]:
        """Symbol -> size in bytes (libzpool; a tunable's C type is 4 or 8 bytes)."""
        return _nm(self.path)[1] if self.kind == "libzpool" else {}

    @cached_property
    def got_slots(self) -> dict[str, int]:
        """Symbol -> file address of the GOT slot the library's own code reads it through."""
        return _got_slots(self.path) if self.kind == "libzpool" else {}

    def global_address(self, symbol: str, probed: str) -> str | None:
        """A bpftrace expression for the run-time address of a global (a tunable), in a probe on
        function `probed`'s entry: uprobe ip minus the function's file address is the load base.
        Through the library's GOT slot: a program that uses the variable itself (zdb sets
        zfs_vdev_async_read_max_active) gets a copy relocation, and the library's copy goes stale."""
        if self.kind != "libzpool":
            # bpftrace 0.17's kaddr() finds only vmlinux symbols, so the address goes in as a number
            sym = self.symbols.get(symbol)
            return f"{sym[1]:#x}" if sym and sym[0] == "data" and sym[1] else None
        sym, fn = self.symbols.get(symbol), self.symbols.get(probed)
        if not sym or not fn or sym[0] != "data" or fn[0] != "func":
            return None
        base = f'reg("ip") - {fn[1]:#x}'
        slot = self.got_slots.get(symbol)
        return f"(*(uint64 *)({base} + {slot:#x}))" if slot else f"({base} + {sym[1]:#x})"


def _exported_symbols(path: str) -> dict[str, tuple[str, int]]:
    return _nm(path)[0]


@lru_cache(maxsize=8)
def _nm(path: str) -> tuple[dict[str, tuple[str, int]], dict[str, int]]:
    """(name -> (kind, file address), name -> size in bytes) of the library's defined dynamic symbols."""
    try:
        out = subprocess.run(["nm", "-D", "-S", "--defined-only", path], capture_output=True,
                             text=True, check=True).stdout
    except FileNotFoundError:
        raise ZfsobsError("nm (binutils) is needed to list the library's functions: apt-get install binutils") from None
    except subprocess.CalledProcessError as exc:
        raise ZfsobsError(f"{path}: cannot read its symbols: {exc.stderr.strip()}") from None
    names, sizes = {}, {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) in (3, 4) and parts[-2] in ("T", "t", "W", "D", "d", "B", "b"):
            kind = "func" if parts[-2] in ("T", "t", "W") else "data"
            names[parts[-1]] = (kind, int(parts[0], 16))
            if len(parts) == 4:
                sizes[parts[-1]] = int(parts[1], 16)
    return names, sizes


def _got_slots(path: str) -> dict[str, int]:
    try:
        out = subprocess.run(["readelf", "-rW", path], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    slots = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[2] == "R_X86_64_GLOB_DAT":
            slots[parts[4]] = int(parts[0], 16)
    return slots


def _kernel_symbols(path: str = "/proc/kallsyms") -> dict[str, tuple[str, int]]:
    """The zfs module's symbols from /proc/kallsyms (addresses are 0 unless root). A module's
    symbols come together, so only the lines from its first to its last are split: splitting all
    of a kernel's (~120 k) took 3 s of every start under the kernel lab's emulation."""
    names = {}
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return names
    first, last = text.find("[zfs]"), text.rfind("[zfs]")
    if first < 0:
        return names
    for line in text[text.rfind("\n", 0, first) + 1:last + 5].splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[3] == "[zfs]" and parts[1] in "TtDdBbRr":
            names[parts[2]] = ("func" if parts[1] in "Tt" else "data", int(parts[0], 16))
    return names


def library_identity(path: str) -> tuple[str, str]:
    """(OpenZFS version, ELF build-id) read from the library file itself."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ZfsobsError(f"{path}: cannot read: {exc.strerror}") from None
    if data[:4] != b"\x7fELF":
        raise ZfsobsError(f"{path}: not an ELF shared library")
    match = _VERSION_RE.search(data)
    at = data.find(_BUILD_ID_NOTE)
    build_id = data[at + 16: at + 36].hex() if at >= 0 else ""
    if match:
        return match.group(1).decode(), build_id
    # 2.3's libzpool carries no version string: a build offsets.json lists, or scripts/setup's note
    return _known_build(build_id) or _setup_version(path) or "unknown", build_id


def _known_build(build_id: str) -> str:
    try:
        table = offsets_table().get("libzpool", {})
    except (OSError, ValueError):
        return ""
    return next((v for v, e in table.items() if build_id and build_id in e.get("build_ids", [])), "")


def _setup_version(path: str) -> str:
    """DIR/OPENZFS_VERSION (a Debian package version) beside DIR/lib, where scripts/setup unpacks a build."""
    try:
        with open(os.path.join(os.path.dirname(os.path.dirname(path)), "OPENZFS_VERSION")) as f:
            match = re.match(r"(?:\d+:)?(\d+\.\d+\.\d+)", f.read().strip())
    except OSError:
        return ""
    return match.group(1) if match else ""


def find_libraries() -> list[str]:
    found = []
    for pattern in LIB_GLOBS:
        for path in sorted(glob.glob(pattern)):
            real = os.path.realpath(path)
            if real not in found and os.path.isfile(real):
                found.append(real)
    return found


def linked_library(program: str, libdir: str = "") -> str | None:
    """The libzpool `program` loads (ldd; with `libdir` first on its library path), so the probes
    go where the lab's code runs."""
    env = dict(os.environ, LD_LIBRARY_PATH=libdir) if libdir else None
    try:
        out = subprocess.run(["ldd", program], capture_output=True, text=True, timeout=10, env=env).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        if "libzpool" in line and "=>" in line:
            path = line.split("=>")[1].split("(")[0].strip()
            return path if path.startswith("/") else None     # "not found"
    return None


def libzpool(path: str | None = None) -> Target:
    if path is None:
        libs = find_libraries()
        if not libs:
            raise ZfsobsError("no libzpool found (userland ZFS); install it with ./scripts/setup "
                              "or name one with --target /path/to/libzpool.so")
        path = libs[-1]
    real = os.path.realpath(path)
    if os.path.isdir(real):
        raise ZfsobsError(f"{path}: is a directory; --target names a libzpool.so file")
    if not os.path.isfile(real):
        raise ZfsobsError(f"{path}: no such library")
    real = library_path(path, real)     # before anything reads it: the path goes into the scripts
    version, build_id = library_identity(real)
    target = Target("libzpool", real, version, build_id)
    if "spa_sync" not in target.functions:     # every OpenZFS has it; without it this is not ZFS
        raise ZfsobsError(f"{path}: not a libzpool (no spa_sync); --target takes kernel, libzpool, "
                          "or the path of a libzpool.so")
    return target


def kernel() -> Target:
    if uses_dtrace():     # illumos / FreeBSD: dtrace traces the kernel's ZFS (docs/illumos.md)
        return Target("kernel", "", platform.release(), "")
    if not os.path.isdir("/sys/module/zfs"):
        raise ZfsobsError("the zfs kernel module is not loaded here (try --lab for the userland lab, "
                          "or `zfsobs lab --kernel`)")
    try:
        with open("/sys/module/zfs/version") as f:
            version = f.read().split("-")[0].strip() or "unknown"
    except OSError:
        version = "unknown"
    return Target("kernel", "", version, "", btf=os.path.exists("/sys/kernel/btf/zfs"))


def kernel_zfs() -> bool:
    """ZFS runs in this kernel: its Linux module, or illumos/FreeBSD's (traced with DTrace)."""
    return os.path.isdir("/sys/module/zfs") or uses_dtrace()


def resolve(spec: str | None) -> Target:
    """--target: 'kernel', 'libzpool', 'libzpool:PATH' or a library path; default: kernel if loaded."""
    if spec in (None, "", "auto"):
        return kernel() if kernel_zfs() else libzpool()
    if spec == "kernel":
        return kernel()
    if spec == "libzpool":
        return libzpool()
    if spec.startswith("libzpool:"):
        return libzpool(spec.split(":", 1)[1])
    if "/" in spec:
        return libzpool(spec)
    raise ZfsobsError(f"unknown target {spec!r}: use kernel, libzpool, libzpool:PATH or a library path")
