"""Oracle's DTrace 2.x on Linux compiles its D libraries (translators for io, proc, sched, ...) at
every start, from the newest set made for a kernel no newer than the running one. A set can fail on
a newer kernel, and then every command fails, `-l` included: dtrace 2.0.7's 6.10 io.d on Linux 7.2
("b_end_io is not a member of struct buffer_head", issue 27). zfsobs's scripts use none of those
translators, only the built-in variables (timestamp, argN), which live in the BPF library beside
them (-xnolibs drops that too). So when a library fails, zfsobs gives dtrace (-xsyslibdir) a copy
of the library directory without the .d files that name kernel types: what stays is constants
(errno.d, signal.d, unistd.d, regs.d in 2.0.7). The copy is kept per library and kernel."""
from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
from pathlib import Path

# '"/usr/lib/x86_64-linux-gnu/dtrace/6.10/io.d", line 52: b_end_io is not a member of struct buffer_head'
LIBRARY_ERROR = re.compile(r'"(/\S+)/[\d.]+/[\w.-]+\.d", line \d+: ')
KERNEL_TYPES = re.compile(r"\bstruct\b|\btranslator\b|->")
CACHE = Path("/var/cache/zfsobs/dtrace-libs")


def failing_library(stderr: str) -> str:
    """The library directory when dtrace's error is in one of its own library files, else ''."""
    m = LIBRARY_ERROR.search(stderr)
    return m.group(1) if m and os.path.isdir(m.group(1)) else ""


def trimmed(libdir: str, cache: Path = CACHE) -> str:
    """A copy of LIBDIR whose .d files name no kernel type, made once per library and kernel."""
    files = sorted(str(p.relative_to(libdir)) + f" {p.stat().st_size} {p.stat().st_mtime_ns}"
                   for p in Path(libdir).rglob("*") if p.is_file())
    key = hashlib.sha256("\n".join([libdir, platform.release()] + files).encode()).hexdigest()[:16]
    dest = cache / f"{platform.release()}-{key}"
    if (dest / ".complete").is_file():
        return str(dest)
    staging = Path(f"{dest}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(libdir, staging, symlinks=True)
    for lib in staging.rglob("*.d"):
        if KERNEL_TYPES.search(lib.read_text(errors="replace")):
            lib.unlink()
    (staging / ".complete").write_text(f"{libdir} without the .d files that name kernel types\n")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(staging, dest)
    return str(dest)
