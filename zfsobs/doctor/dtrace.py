"""`zfsobs doctor` on illumos and FreeBSD, and on Linux where Oracle's DTrace 2.x is installed
(`--tracer dtrace`): dtrace, its privileges, and which probes each D script needs that this kernel
has (`dtrace -l -m zfs`). One row per check, with a one-line fix."""
from __future__ import annotations

import os
import platform

from zfsobs.sources.dtrace import (check_dtrace, choose, dtrace_options, dtrace_version, present,
                                  script_probes)
from zfsobs.errors import ZfsobsError
from zfsobs.sources.bpftrace import DEFAULT_PROBES

OK, WARN, BAD = "ok", "warn", "FAIL"
FIX_DTRACE = {"FreeBSD": "kldload dtraceall (and pkg install dtrace-toolkit for extras)"}


def checks(system: str | None = None) -> tuple[list[tuple[str, str, str]], bool]:
    """(status, what, detail) rows, and whether anything can be traced."""
    system = system or platform.system()
    rows = []
    try:
        dtrace = check_dtrace()
    except ZfsobsError as exc:
        fix = FIX_DTRACE.get(system, "it ships with the OS in /usr/sbin/dtrace; check PATH")
        rows.append((BAD, "dtrace", f"{exc}; fix: {fix}"))
        return rows, False
    rows.append((OK, "dtrace", f"{dtrace} {dtrace_version(dtrace)}"))
    root = os.geteuid() == 0
    try:
        _, listed, libs = dtrace_options(dtrace)
    except ZfsobsError as exc:
        rows.append((BAD, "dtrace privileges", f"{'root, yet ' if root else ''}{exc}"))
        return rows, False
    if libs:
        rows.append((WARN, "dtrace libraries", libs))
    rows.append((OK, "dtrace privileges", f"{'root' if root else 'dtrace_kernel'}: {len(listed)} zfs probes listed"))
    if not listed:
        rows.append((BAD, "zfs module", "no zfs probes: is ZFS loaded? (FreeBSD: kldload zfs)"))
        return rows, False
    traceable = False
    for name in DEFAULT_PROBES:
        state, detail = metric(name, listed, system)
        rows.append((state, f"metric {name} (dtrace)", detail))
        traceable |= state != BAD
    return rows, traceable


def metric(name: str, listed: set[str], system: str | None = None) -> tuple[str, str]:
    """Metric NAME's verdict from the probes this kernel lists: its first D script that can run."""
    text, why = choose(name, listed, system)
    if why:
        return BAD, f"{why} (an older build, or one that inlines them); fix: none here, see docs/illumos.md"
    absent = [p for p in script_probes(text) if not present(p, listed)]
    if absent:
        return WARN, f"partial: {', '.join(absent)} absent (their fields stay 0 or -1; docs/illumos.md)"
    return OK, f"all {len(script_probes(text))} probes present"
