"""Child processes die with zfsobs, even when zfsobs is killed with SIGKILL."""
from __future__ import annotations

import ctypes
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """For preexec_fn: the kernel sends `sig` to this child when its parent dies.
    SIGTERM lets bpftrace detach its probes on the way out."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    except OSError:
        pass
