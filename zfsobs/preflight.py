"""Checks of the user's input that run before a session starts anything (no probe attached, no lab
started, no capture created): a mistake costs a one-line error, not a run that fails later."""
from __future__ import annotations

import os
import shutil
import stat
import tempfile

from zfsobs.errors import ZfsobsError


def check_output_name(path: str, force: bool) -> None:
    """-O FILE names a file this run may write: not a directory, not an existing file without --force,
    with it only a regular file (never through a symlink)."""
    if os.path.isdir(path):
        raise ZfsobsError(f"{path}: is a directory; name the capture file to write")
    if os.path.lexists(path) and not force:
        raise ZfsobsError(f"{path}: exists; choose another name or pass --force")
    if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):    # a symlink, a device
        raise ZfsobsError(f"-O {path}: not a regular file")


def check_output_dir(path: str) -> None:
    """The capture FILE can be created there (CaptureWriter still reports what only creating it shows)."""
    parent = os.path.dirname(os.path.abspath(path))
    try:
        if not stat.S_ISDIR(os.stat(parent).st_mode):
            raise ZfsobsError(f"{path}: cannot create capture: {parent} is not a directory")
    except FileNotFoundError:
        raise ZfsobsError(f"{path}: cannot create capture: no directory {parent}") from None
    except OSError as exc:
        raise ZfsobsError(f"{path}: cannot create capture: {parent}: {exc.strerror}") from None
    if os.statvfs(parent).f_flag & os.ST_RDONLY:
        raise ZfsobsError(f"{path}: cannot create capture: read-only file system")
    if not os.access(parent, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise ZfsobsError(f"{path}: cannot create capture: permission denied")
    try:        # what only creating a file shows (/proc, /sys refuse it): a probe file, removed at once
        fd, probe = tempfile.mkstemp(prefix=".zfsobs-check-", dir=parent)
    except OSError as exc:
        raise ZfsobsError(f"{path}: cannot create capture: {parent}: {exc.strerror}") from None
    os.close(fd)
    os.unlink(probe)


def check_command(name: str) -> None:
    """`-- CMD`: CMD can be run (status 127 or 126 if not, as in a shell)."""
    if "/" in name:
        if not os.path.exists(name):
            raise ZfsobsError(f"-- {name}: no such file", 127)
        if os.path.isdir(name):
            raise ZfsobsError(f"-- {name}: is a directory, not a command", 126)
        if not os.access(name, os.X_OK):
            raise ZfsobsError(f"-- {name}: not executable", 126)
    elif not shutil.which(name):
        hint = " (a zfsobs option? put it before --)" if name.startswith("-") else ""
        raise ZfsobsError(f"-- {name}: command not found{hint}", 127)


def check_lab_options(lab) -> None:
    """Each -o NAME=VALUE names a tunable the lab's libzpool exports (ztest would exit at start
    with "failed to set global var", after the probes attached)."""
    from zfsobs.labs.knob import parse_assignment
    for option in lab.options:
        parse_assignment(option, lab.target)
