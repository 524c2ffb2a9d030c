"""A D script as the system that runs it needs it. The scripts are written once, portable: typed
casts of argN (fbt's args[] are untyped on Linux, and a clause using them cannot be kept by -Z on a
probe the kernel lacks) and `*(T *)&`name` for tunables (a backquoted kernel variable has no type on
Linux). What differs is where OpenZFS's DTRACE_PROBE points are: illumos and FreeBSD have them as
sdt probes (`sdt:::txg-synced`); a Linux zfs.ko built by DKMS has no sdt provider, each point is a
stub function named trace_zfs_ + the C name (`txg__synced`: a dash in D is a double underscore in
C), which fbt reaches with the same arguments (docs/illumos.md). A flag whose value changed
between releases is written CONST(NAME), put in from the module's own (Linux: its BTF or source).
A counter's slot is written SLOT(field), its number from the metric's field table (zfsobs/fields.py,
as the .bt twin's).

A metric can have a script per ZFS lineage (D_DIRS, tried in order): illumos's, and OpenZFS 2.2+'s
where the functions illumos's uses are gone (inlined on Linux and FreeBSD)."""
from __future__ import annotations

import platform
import re
from pathlib import Path
from typing import Callable

from zfsobs.errors import ZfsobsError
from zfsobs.targets.names import script_int
from zfsobs.targets.probe_files import probes_dir
from zfsobs.targets.sets import kind_of, slots

D_DIRS = ("illumos", "dtrace-openzfs")
SDT_RE = re.compile(r"\bsdt:::([\w-]+)")
CONST_RE = re.compile(r"\bCONST\((\w+)\)")


def variants(name: str) -> list[Path]:
    """The D scripts of metric NAME, in the order they are tried."""
    return [p for p in (probes_dir() / d / f"{name}.d" for d in D_DIRS) if p.is_file()]


def script_text(path: Path) -> str:
    """The D script at PATH with its slots numbered from its metric's field table (the file's stem)."""
    return slots(path.read_text(), kind_of(path.stem))


def for_system(text: str, system: str | None = None,
               constants: Callable[[], dict[str, int]] | None = None) -> str:
    """TEXT for SYSTEM (default: this one): on Linux each sdt probe becomes its stub's fbt entry,
    in the clauses and the header's Probes and Requires lists alike; with `constants` (called only
    if the script has any), each CONST(NAME) becomes the module's value."""
    if (system or platform.system()) == "Linux":
        text = SDT_RE.sub(lambda m: f"fbt::trace_zfs_{m.group(1).replace('-', '__')}:entry", text)
    names = set(CONST_RE.findall(text))
    if names and constants is not None:
        known = constants()
        if names - set(known):
            raise ZfsobsError(f"{', '.join(sorted(names - set(known)))} unknown for this module")
        text = CONST_RE.sub(lambda m: script_int(known[m.group(1)], m.group(1)), text)
    return text
