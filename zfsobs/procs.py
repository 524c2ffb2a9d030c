"""Child processes and temp files do not outlive zfsobs, even when it is killed with SIGKILL."""
from __future__ import annotations

import ctypes
import os
import shutil
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """For preexec_fn: the kernel sends `sig` to this child when its parent dies.
    SIGTERM lets bpftrace detach its probes on the way out."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except OSError:
        pass


def remove_stale(root: str, prefix: str) -> None:
    """Remove root/<prefix><pid>-* directories whose zfsobs (pid) is gone: left by a SIGKILL, which
    no cleanup of ours survives."""
    for name in os.listdir(root):
        if not name.startswith(prefix):
            continue
        try:
            os.kill(int(name[len(prefix):].split("-")[0]), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        except (ValueError, PermissionError):
            continue
