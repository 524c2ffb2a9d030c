"""What a value must be before it goes into a probe script or a traced command's arguments.

A library path lands in bpftrace's `uprobe:PATH:FUNCTION` unquoted (bpftrace has no quoting for
it), so it is a whitelist: absolute, only [A-Za-z0-9._/+-], a regular file that neither it nor any
directory above it lets another user replace (owner root or this user, not writable by group or
others; a sticky directory such as /tmp may be). A pool name follows zpool(8)'s naming rules.
Every refusal is one ZfsobsError line with the value shown escaped (repr).
"""
from __future__ import annotations

import os
import re
import stat

from zfsobs.errors import ZfsobsError

LIBRARY_PATH_RE = re.compile(r"/[A-Za-z0-9._/+-]*")
LIBRARY_CHARS = "A-Z a-z 0-9 . _ / + -"
# zpool(8): a letter first, then letters, digits, "_", "-", ":", " " and "."; these are reserved
POOL_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.: -]*")
POOL_RESERVED = ("mirror", "raidz", "draid", "spare")
POOL_MAX = 255                   # ZFS_MAX_DATASET_NAME_LEN less its terminating NUL


def trusted_owner(st: os.stat_result) -> bool:
    return st.st_uid in (0, os.geteuid())


def library_path(given: str, real: str) -> str:
    """`real` (the resolved `given`) if a probe script can name it as the library it traces."""
    if not LIBRARY_PATH_RE.fullmatch(real):
        shown = repr(given) if given == real else f"{given!r} (resolved: {real!r})"
        raise ZfsobsError(f"--target {shown}: a library path may hold only {LIBRARY_CHARS}; "
                          "it goes into the probe script as it is")
    try:
        st = os.lstat(real)
    except OSError as exc:
        raise ZfsobsError(f"{given}: no such library ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ZfsobsError(f"{given}: not a regular file; --target names a libzpool.so file")
    if not trusted_owner(st) or st.st_mode & 0o022:
        raise ZfsobsError(f"{given}: {real} is owned by uid {st.st_uid} or writable by others "
                          f"(mode {stat.S_IMODE(st.st_mode):o}); a traced library must be root's and "
                          "not writable by group or others")
    why = unsafe_directories(os.path.dirname(real))
    if why:
        raise ZfsobsError(f"{given}: {why}: another user could replace the library")
    return real


def unsafe_directories(path: str) -> str:
    """Why another user could replace what is in directory `path` (absolute, resolved), or '':
    each directory from it up to / is root's or this user's and not writable by group or others
    unless sticky (as /tmp is: there only an entry's owner can rename or remove it)."""
    while True:
        try:
            st = os.lstat(path)
        except OSError as exc:
            return f"{path}: {exc.strerror}"
        writable = st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX
        if not stat.S_ISDIR(st.st_mode) or not trusted_owner(st) or writable:
            return (f"{path} is not a directory, or is owned by uid {st.st_uid} or writable by others "
                    f"(mode {stat.S_IMODE(st.st_mode):o})")
        if path == os.path.dirname(path):
            return ""
        path = os.path.dirname(path)


def pool_name(name: str) -> str:
    """`name` if it can be a ZFS pool's name (zpool(8)), else one line saying why not."""
    if len(name) > POOL_MAX or not POOL_RE.fullmatch(name):
        raise ZfsobsError(f"-p {name[:64]!r}: not a pool name (zpool(8): a letter first, then letters, "
                          f"digits, _ - : . and space, at most {POOL_MAX} characters)")
    if name == "log" or name.startswith(POOL_RESERVED):
        raise ZfsobsError(f"-p {name!r}: a name zpool(8) reserves; no pool can have it")
    return name


def script_int(value, what: str) -> str:
    """An offset or flag value as the decimal a script holds: only a true int goes in."""
    if type(value) is not int:
        raise ZfsobsError(f"{what}: {str(value)[:40]!r} is not an integer; it cannot go into a probe script")
    return str(value)
