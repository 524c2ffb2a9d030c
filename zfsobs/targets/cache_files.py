"""A cache directory only root (or this user) can change, and its files read and written safely.

What a cache holds goes into probe scripts (struct offsets), so a cache another user can write is
not read: the directory must be a real directory (not a symlink), owned by root or this user, not
writable by group or others, and so must each directory above it (names.unsafe_directories). A
file is read through O_NOFOLLOW and only if it is ours and not writable by others; one is written
under a mkstemp name in the directory and renamed over its name (a symlink there is replaced, never
followed). A new directory is made 0700.
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from zfsobs.targets.names import trusted_owner, unsafe_directories


def private_dir(path: Path, create: bool = True) -> tuple[Path | None, str]:
    """(path, '') when it is (or, with `create`, is now) a cache directory fit to use, else
    (None, why not)."""
    path = Path(os.path.abspath(path))
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            return None, f"{path}: cannot create: {exc.strerror}"
    try:
        st = os.lstat(path)
    except OSError as exc:
        return None, f"{path}: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return None, f"{path} is a symlink"
    if st.st_mode & 0o022:                 # sticky or not: others could plant names in it
        return None, f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    why = unsafe_directories(str(path))
    return (None, why) if why else (path, "")


def read_trusted(path: Path) -> str | None:
    """The text of cache file `path`, or None if it is absent, a symlink, not a regular file, or
    another user's or writable by others."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or not trusted_owner(st) or st.st_mode & 0o022:
            return None
        return f.read(16 << 20).decode(errors="replace")


def write_atomic(path: Path, text: str) -> None:
    """`text` as file `path` (in a directory private_dir accepted), all or nothing; OSError if not."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
