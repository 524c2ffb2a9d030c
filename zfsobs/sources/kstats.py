"""ZFS's own counters, read without root: the procfs kstats (/proc/spl/kstat/zfs), the module
parameters (/sys/module/zfs/parameters) and `zpool iostat -q`. Parsers only; the kstat source
(zfsobs/sources/kstat.py) turns them into events, and the kernel fidelity tests read their ground
truth with the same functions."""
from __future__ import annotations

import os
import shutil

KSTAT = "/proc/spl/kstat/zfs"
PARAMS = "/sys/module/zfs/parameters"
# `zpool iostat -q` column pairs (pending, active) in order, as zio_priority_t class numbers:
# syncq_read syncq_write asyncq_read asyncq_write scrubq_read trimq_write [rebuildq_write, 2.2+]
IOSTAT_Q_CLASSES = (0, 1, 2, 3, 4, 7, 8)
CLASS_PARAMS = ("sync_read", "sync_write", "async_read", "async_write", "scrub", "removal",
                "initializing", "trim", "rebuild")


def named(text: str) -> dict[str, int]:
    """A named kstat (`name type data` rows after two header lines), its numeric values."""
    out = {}
    for row in text.splitlines()[2:]:
        parts = row.split()
        if len(parts) == 3 and parts[2].lstrip("-").isdigit():
            out[parts[0]] = int(parts[2])
    return out


def counters(name: str) -> dict[str, int]:
    """The named kstat NAME (zil, dmu_tx, vdev_cache_stats) now; {} when absent."""
    return named(read(f"{KSTAT}/{name}") or "")


def change(name: str, base: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """The named kstat NAME now, and how much each counter moved since BASE."""
    now = counters(name)
    return now, {k: v - base.get(k, 0) for k, v in now.items()}


def txgs(text: str) -> dict[int, dict]:
    """/proc/spl/kstat/zfs/<pool>/txgs: per txg its state (B O Q W S C) and numbers (times in ns)."""
    lines = text.split("\n")
    header = lines[0].split() if lines else []
    rows = {}
    for line in lines[1:]:
        parts = line.split()
        if len(parts) == len(header) and parts[0].isdigit():
            row = dict(zip(header, parts))
            rows[int(row["txg"])] = {k: (v if k == "state" else int(v)) for k, v in row.items()}
    return rows


def iostat_q_row(line: str) -> tuple[str, dict[int, tuple[int, int]]] | None:
    """One `zpool iostat -q -v -H -p` row: (name, {class: (pending, active)}); None for anything
    else (the -T u timestamp, a blank line between vdev groups)."""
    parts = line.rstrip("\n").split("\t")
    pairs = (len(parts) - 7) // 2
    if len(parts) < 7 + 12 or (len(parts) - 7) % 2 or pairs > len(IOSTAT_Q_CLASSES):
        return None
    try:
        nums = [int(p) for p in parts[7:]]
    except ValueError:
        return None
    return parts[0].strip(), {IOSTAT_Q_CLASSES[i]: (nums[2 * i], nums[2 * i + 1]) for i in range(pairs)}


def read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def param(name: str) -> int | None:
    """A zfs module parameter (world-readable), None if absent."""
    text = read(os.path.join(PARAMS, name))
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def pools() -> list[str]:
    """Imported pools: the directories with a txgs kstat."""
    try:
        names = os.listdir(KSTAT)
    except OSError:
        return []
    return sorted(n for n in names if os.path.exists(os.path.join(KSTAT, n, "txgs")))


def zpool() -> str | None:
    """The zpool command (`zpool iostat -q` gives queue depth without root), None if absent."""
    return shutil.which("zpool") or next((p for p in ("/usr/sbin/zpool", "/sbin/zpool") if os.path.exists(p)), None)


def unusable() -> str:
    """Why kstat mode cannot run here ('' if it can): doctor says it, the source raises it."""
    if not os.path.isdir("/sys/module/zfs") or not os.path.isdir(KSTAT):
        return f"no {KSTAT}: kstats exist only for the zfs kernel module's pools (not the userland lab)"
    if param("zfs_txg_history") == 0:
        return ("zfs_txg_history=0: the txgs kstat keeps no txgs, which kstat mode reads "
                "(as root: echo 100 > /sys/module/zfs/parameters/zfs_txg_history)")
    return ""
