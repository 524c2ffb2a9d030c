"""Processes: finding them in /proc, and making sure our children and temp files do not outlive
zfsobs, even when it is killed with SIGKILL."""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
from typing import Callable

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """For preexec_fn: the kernel sends `sig` to this child when its parent dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except OSError:
        pass


def stop(proc: subprocess.Popen, wait: float) -> None:
    """SIGTERM to a child still running, then SIGKILL if it has not ended within `wait` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def remove_stale(root: str, prefix: str) -> None:
    """Remove root/<prefix><pid>-* directories whose zfsobs (pid) is gone: left by a SIGKILL, which
    no cleanup of ours survives; and first stop what still holds a file in one. No parent-death
    signal reaches the lab's ztest pass process (ztest forked it): one ran on for 38 minutes on a
    deleted pool after CI's SIGKILL test, tracing hits and CPU for every run after it."""
    stale = []
    for name in os.listdir(root):
        if not name.startswith(prefix):
            continue
        try:
            os.kill(int(name[len(prefix):].split("-")[0]), 0)
        except ProcessLookupError:
            stale.append(os.path.join(root, name) + os.sep)
        except (ValueError, PermissionError):
            continue
    if stale:
        for pid in scan(lambda pid: holds(pid, tuple(stale))):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for path in stale:
        shutil.rmtree(path, ignore_errors=True)


def holds(pid: int, dirs: tuple[str, ...]) -> bool:
    """Whether the process has a file open under one of `dirs` (each ending in a separator)."""
    fds = f"/proc/{pid}/fd"
    for fd in os.listdir(fds):
        try:
            if os.readlink(os.path.join(fds, fd)).startswith(dirs):
                return True
        except OSError:     # closed meanwhile
            continue
    return False


def scan(keep: Callable[[int], bool]) -> list[int]:
    """The running processes for which keep(pid) holds, from a snapshot of /proc; one that ends
    while it is looked at (OSError) is left out."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if keep(int(entry)):
                    found.append(int(entry))
            except OSError:
                continue
    return found


def exe(pid: int) -> str:
    return os.path.realpath(f"/proc/{pid}/exe")


def in_group(pid: int, leader: int, program: str) -> bool:
    """Process `pid` runs `program` (a resolved path) in the process group `leader` leads."""
    return os.getpgid(pid) == leader and exe(pid) == program
