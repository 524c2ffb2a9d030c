"""The bpftrace binary zfsobs runs: which one ($ZFSOBS_BPFTRACE or PATH), its version (asked once
per binary), whether it is new enough, the flags the probes need from it, and the checks that
tracing can run here at all."""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess

from zfsobs.errors import ZfsobsError
from zfsobs.targets.render import version_tuple

# The oldest bpftrace the probes are tested with (Debian 12's); older ones lack what they use
# (while loops, reg("ip") in uprobes, the casts and printf widths), and fail in ways that read badly.
MIN_BPFTRACE = (0, 17, 0)


def check_tracing() -> str:
    """The bpftrace binary, or a one-line reason why tracing cannot run here."""
    if os.geteuid() != 0:
        raise ZfsobsError("tracing needs root (BPF uprobes/kprobes): run as root or with sudo")
    path = bpftrace_path()
    if not path and os.environ.get("ZFSOBS_BPFTRACE"):
        named = os.environ["ZFSOBS_BPFTRACE"]
        what = "not an executable file" if os.path.exists(named) else "not found"
        raise ZfsobsError(f"{os.environ.get('ZFSOBS_BPFTRACE_GIVEN') or '$ZFSOBS_BPFTRACE'} {named}: {what}")
    if not path:
        raise ZfsobsError("bpftrace not found: install it (./scripts/setup, or apt-get install bpftrace)")
    old = too_old(path, bpftrace_version(path))
    if old:
        raise ZfsobsError(old)
    if not os.path.exists("/sys/kernel/tracing/uprobe_events") and os.path.isdir("/sys/kernel/tracing"):
        # Without tracefs bpftrace cannot detach cleanly; mounting it is harmless.
        subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"],
                       capture_output=True, check=False)
    return path


def bpftrace_path() -> str | None:
    """The bpftrace to run: $ZFSOBS_BPFTRACE (another build, e.g. scripts/bpftrace-chroot's
    wrapper), else the one on PATH."""
    named = os.environ.get("ZFSOBS_BPFTRACE")
    if named:
        return shutil.which(named)
    return shutil.which("bpftrace")


def too_old(path: str, version: str) -> str:
    """Why this bpftrace cannot run the probes ('' if it can, or if its version is unreadable)."""
    if version != "unknown" and not re.match(r"v?\d+\.\d+", version):
        return f"{path} is not bpftrace: its --version says {version!r}"
    if (0, 0, 0) < version_tuple(version) < MIN_BPFTRACE:
        return (f"{path} is bpftrace {version}; the probes need {'.'.join(map(str, MIN_BPFTRACE[:2]))} "
                "or newer (Debian 12 ships 0.17: apt-get install bpftrace)")
    return ""


def run_flags(version: str, kernel: bool) -> list[str]:
    """bpftrace's flags for the probes. --no-warnings (0.17+): 0.23 prints a warning on stdout for
    every failed map delete, and 0.27 a page of type notes. --no-feature kprobe_multi (0.23+, on the
    kernel): from 0.26 an exact kprobe:X and kretprobe:X pair becomes one session program
    (bpftrace#5176), and zil's and throttle's spa_sync pairs then pass the 512-byte BPF stack;
    without kprobe_multi no pair is merged, as up to 0.25."""
    return ["--no-warnings"] + (["--no-feature", "kprobe_multi"] if kernel and version_tuple(version) >= (0, 23, 0) else [])


def bpftrace_version(path: str) -> str:
    """Asked once per binary (by path and mtime): a start asked three times, 1.6 s each under TCG."""
    try:
        st = os.stat(path)
    except OSError:
        return "unknown"
    return _version(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=16)
def _version(path: str, _mtime: int, _size: int) -> str:
    """Asked up to three times: the version picks workarounds (render.sums_need_create), and a lab
    test once got no answer from a chroot's wrapper on a busy machine, which the cache then kept."""
    for _ in range(3):
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
        except OSError:
            return "unknown"
        except subprocess.TimeoutExpired:
            continue
        if out.strip():
            return _first_line(out).replace("bpftrace ", "")
    return "unknown"


def _first_line(text: str, limit: int = 80) -> str:
    """A --version answer as one line of at most `limit` characters."""
    line = text.strip().splitlines()[0].strip()
    return line if len(line) <= limit else line[:limit - 1] + "…"
