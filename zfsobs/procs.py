"""Processes: finding them in /proc, and making sure our children and temp files do not outlive
zfsobs, even when it is killed with SIGKILL.

Run as a script (`python -I -S procs.py watch DIR`) it is a Watchdog: a process of its own that
outlives a SIGKILL of zfsobs and then kills what zfsobs handed it and removes its directory."""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import stat
import subprocess
import sys
from typing import Callable

PR_SET_PDEATHSIG = 1
PID_MAX = "/proc/sys/kernel/pid_max"
PID_LIMIT = 1 << 22          # the kernel's largest pid_max (PID_MAX_LIMIT on 64-bit)

_forking = os.getpid()       # the pid that forks the next child: die_with_parent's parent


def _before_fork() -> None:
    global _forking
    _forking = os.getpid()


os.register_at_fork(before=_before_fork)


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """For preexec_fn: the kernel sends `sig` to this child when its parent dies; a parent that
    died before the prctl (the child is an orphan already) gets it sent now."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except OSError:
        pass
    if os.getppid() != _forking:
        os.kill(os.getpid(), sig)


def stop(proc: subprocess.Popen, wait: float) -> None:
    """SIGTERM to a child still running, then SIGKILL if it has not ended within `wait` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _pid_max() -> int:
    try:
        with open(PID_MAX) as f:
            return min(int(f.read()), PID_LIMIT)
    except (OSError, ValueError):
        return PID_LIMIT


def stale_pid(name: str, prefix: str, pid_max: int) -> int | None:
    """The pid in a name `<prefix><pid>-*` if it is one a process could have (digits only, 1 to
    pid_max - 1) and no process has it now; else None."""
    digits = name[len(prefix):].partition("-")[0]
    if not name.startswith(prefix) or not (digits.isascii() and digits.isdigit()) or len(digits) > 8:
        return None
    pid = int(digits)
    if not 0 < pid < pid_max:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return pid
    except OSError:
        pass
    return None


def _ours(st: os.stat_result) -> bool:
    """A directory as zfsobs makes its temp dirs (mkdtemp as root): root's, and no one else may write."""
    return stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022


def remove_stale(root: str, prefix: str) -> None:
    """Remove root/<prefix><pid>-* directories whose zfsobs (pid) is gone: left when a SIGKILL
    took zfsobs and its Watchdog too; and first stop what still holds a file in one. Only what
    zfsobs provably made goes: a real directory (opened O_NOFOLLOW, never through a symlink),
    root's, writable by no one else, in a root where no one else can rename entries (sticky or
    not writable by others); removed relative to that root's fd, never following a symlink."""
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        st = os.fstat(root_fd)
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            return
        pid_max = _pid_max()
        stale = []
        for name in os.listdir(root_fd):
            if stale_pid(name, prefix, pid_max) is None:
                continue
            try:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root_fd)
            except OSError:
                continue
            try:
                if _ours(os.fstat(fd)):
                    stale.append((name, os.readlink(f"/proc/self/fd/{fd}") + os.sep))
            except OSError:
                continue
            finally:
                os.close(fd)
        if stale:
            for pid in scan(lambda pid: holds(pid, tuple(path for _, path in stale))):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for name, _ in stale:
            shutil.rmtree(name, ignore_errors=True, dir_fd=root_fd)
    finally:
        os.close(root_fd)


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


class Watchdog:
    """A process of its own session that zfsobs tells, through a pipe only zfsobs holds, which
    process groups to kill and which directory (one zfsobs made) to remove once zfsobs is gone
    without calling done(): after a SIGKILL, when no parent-death signal reaches a grandchild
    (the lab's ztest pass, forked by ztest). done() ends it without touching anything."""

    def __init__(self, directory: str):
        read, self._pipe = os.pipe()         # not inheritable: no other child holds it open
        try:
            self.proc = subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__), "watch", directory],
                                         stdin=read, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True, cwd="/")
        except BaseException:
            os.close(self._pipe)
            raise
        finally:
            os.close(read)

    def group(self, pgid: int) -> None:
        """Kill process group `pgid` if zfsobs dies."""
        os.write(self._pipe, f"{pgid}\n".encode())

    def done(self) -> None:
        """zfsobs stopped and removed everything itself: the watchdog exits and does nothing."""
        if self._pipe < 0:
            return
        try:
            os.write(self._pipe, b"done\n")
        except OSError:
            pass
        os.close(self._pipe)
        self._pipe = -1
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _watch(directory: str) -> None:
    """The watchdog's side: read pgids until "done" (exit) or end of file (zfsobs is gone)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    groups = []
    for line in sys.stdin.buffer:
        if line == b"done\n":
            return
        if line.strip().isdigit():
            groups.append(int(line))
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    try:
        if _ours(os.lstat(directory)):     # rmtree never follows a symlink (fd-based on Linux)
            shutil.rmtree(directory, ignore_errors=True)
    except OSError:
        pass


if __name__ == "__main__" and sys.argv[1:2] == ["watch"] and len(sys.argv) == 3:
    _watch(sys.argv[2])
