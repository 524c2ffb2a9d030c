"""Globals of a running libzpool process (ZFS tunables), read and written through /proc/PID/mem.

A tunable lives where the library's own code reads it: through its GOT slot when it has one (a
program that uses the variable itself, like zdb or ztest, gets a copy relocation and the library's
copy goes stale), else at load base + the symbol's file address. Needs root (ptrace access).
"""
from __future__ import annotations

import os

from zfsobs.errors import ZfsobsError
from zfsobs.targets.target import Target


class Gone(Exception):
    """The process ended (or never mapped the library): not an error, processes come and go."""


def _maps(pid: int):
    """(start address, file offset, path) of each mapping of process `pid`."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) == 6:
                    yield int(parts[0].split("-")[0], 16), int(parts[2], 16), parts[5].strip()
    except (FileNotFoundError, ProcessLookupError):
        raise Gone(pid) from None
    except PermissionError:
        raise ZfsobsError(f"cannot read process {pid}'s memory map: needs root") from None


def load_base(pid: int, path: str) -> int:
    """Where `path` is mapped in process `pid`: the start of its file-offset-0 mapping."""
    for start, offset, mapped in _maps(pid):
        if mapped == path and offset == 0:
            return start
    raise Gone(pid)


def mapped_library(pid: int, name: str = "/libzpool.so") -> str:
    """The path of the library process `pid` maps whose path contains `name`."""
    for _, _, mapped in _maps(pid):
        if name in mapped:
            return mapped
    raise ZfsobsError(f"process {pid} has no {name.strip('/')} mapped")


class ProcessGlobals:
    """One process's view of the library's globals; cheap to keep open and poll."""

    def __init__(self, pid: int, target: Target, write: bool = False):
        self.pid, self.target = pid, target
        self.base = load_base(pid, target.path)
        try:
            self.mem = open(f"/proc/{pid}/mem", "r+b" if write else "rb", buffering=0)
        except (FileNotFoundError, ProcessLookupError):
            raise Gone(pid) from None
        except PermissionError:
            raise ZfsobsError(f"cannot open process {pid}'s memory: needs root") from None
        self._addresses: dict[str, int] = {}

    def has(self, name: str) -> bool:
        sym = self.target.symbols.get(name)
        return bool(sym and sym[0] == "data" and self.target.symbol_sizes.get(name) in (1, 2, 4, 8))

    def address(self, name: str) -> int:
        if name not in self._addresses:
            slot = self.target.got_slots.get(name)
            if slot:
                self._addresses[name] = self._read(self.base + slot, 8)
            else:
                self._addresses[name] = self.base + self.target.symbols[name][1]
        return self._addresses[name]

    def read(self, name: str) -> int:
        return self._read(self.address(name), self.target.symbol_sizes[name])

    def write(self, name: str, value: int) -> None:
        size = self.target.symbol_sizes[name]
        if not 0 <= value < 1 << (8 * size):
            raise ZfsobsError(f"{name}={value}: out of range for its {size}-byte type")
        try:
            os.pwrite(self.mem.fileno(), value.to_bytes(size, "little"), self.address(name))
        except OSError as exc:
            raise Gone(self.pid) from exc

    def _read(self, address: int, size: int) -> int:
        try:
            data = os.pread(self.mem.fileno(), size, address)
        except OSError:
            raise Gone(self.pid) from None
        if len(data) != size:
            raise Gone(self.pid)
        return int.from_bytes(data, "little")

    def close(self) -> None:
        self.mem.close()

    def __enter__(self) -> "ProcessGlobals":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
