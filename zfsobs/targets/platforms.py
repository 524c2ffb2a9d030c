"""Which tracer this operating system uses: bpftrace on Linux, dtrace on illumos and FreeBSD."""
from __future__ import annotations

import platform

DTRACE_SYSTEMS = ("SunOS", "illumos", "FreeBSD")


def uses_dtrace(system: str | None = None) -> bool:
    """illumos reports itself as SunOS (uname -s); FreeBSD runs the same D."""
    return (system or platform.system()) in DTRACE_SYSTEMS
