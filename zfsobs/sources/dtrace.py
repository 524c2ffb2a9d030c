"""The live source on illumos and FreeBSD: one `dtrace -q -s` per D script (probes/illumos/), the
same interface and line handling as BpftraceSource (start, poll, finish, close, attached, ended,
meta, unavailable, dropped_at_stop), so capture, replay, report and the views are unchanged.
make_source() picks the tracer for this platform."""
from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import time

from zfsobs import __version__
from zfsobs.errors import ZfsobsError
from zfsobs.targets.platforms import uses_dtrace
from zfsobs.targets.probe_files import probes_dir
from zfsobs.targets.render import Rendered, _header_list
from zfsobs.sources.bpftrace import DEFAULT_PROBES, REQUIRED_PROBES, BpftraceSource, check_tracing
from zfsobs.targets.target import Target

_LIST_RE = re.compile(r"^\s*\d+\s+(\S+)\s+(\S+)\s+(\S*)\s+(\S+)\s*$")


def make_source(target: Target, probes=DEFAULT_PROBES, tunables: dict | None = None, pools=None,
                mode: str = "auto"):
    """dtrace on illumos/FreeBSD, bpftrace elsewhere; `pools`: one pool name is filtered in D too.
    mode kstat: ZFS's own counters (zfsobs/sources/kstat.py); auto: those when tracing cannot run
    here (no root, no bpftrace) and the kernel's kstats can be read instead."""
    from zfsobs.sources.kstat import KstatSource
    if mode == "kstat":
        return KstatSource(target, probes, tunables, pools, why="--source kstat")
    if uses_dtrace():
        return DtraceSource(target, probes, tunables, pools)
    if mode == "auto" and target.kind == "kernel":
        try:
            check_tracing()
        except ZfsobsError as exc:
            return KstatSource(target, probes, tunables, pools, why=str(exc))
    return BpftraceSource(target, probes, tunables)


def d_script(name: str) -> str:
    path = probes_dir() / "illumos" / f"{name}.d"
    if not path.is_file():
        raise ZfsobsError(f"no D script {name!r} in {path.parent}")
    return path.read_text()


def required_probes(text: str) -> list[str]:
    return _header_list(text, "Requires")


def script_probes(text: str) -> list[str]:
    return _header_list(text, "Probes")


def check_dtrace() -> str:
    """The dtrace binary, or a one-line reason why tracing cannot run here."""
    path = shutil.which("dtrace") or next((p for p in ("/usr/sbin/dtrace", "/usr/bin/dtrace") if os.path.exists(p)), None)
    if not path:
        raise ZfsobsError("dtrace not found: on FreeBSD kldload dtraceall; on illumos it is /usr/sbin/dtrace")
    return path


def listed_probes(dtrace: str) -> set[str]:
    """Every probe of the zfs module as provider:module:function:name, from `dtrace -l -m zfs`;
    raises with the reason when dtrace cannot list (privileges)."""
    try:
        done = subprocess.run([dtrace, "-l", "-m", "zfs"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ZfsobsError(f"{dtrace} -l failed: {exc}") from None
    if done.returncode != 0 and not done.stdout:
        reason = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise ZfsobsError(f"dtrace cannot list probes: {reason} (run as root, or on illumos grant "
                          "dtrace_kernel: usermod -K defaultpriv=basic,dtrace_kernel USER)")
    out = set()
    for line in done.stdout.splitlines():
        m = _LIST_RE.match(line)
        if m:
            provider = re.sub(r"\d+$", "", m.group(1))   # sdt probes may carry a pid suffix elsewhere
            out.add(f"{provider}::{m.group(3)}:{m.group(4)}")
    return out


def present(probe: str, listed: set[str]) -> bool:
    """fbt::f:entry needs that function; sdt:::name any function firing it."""
    provider, _, function, name = probe.split(":")
    if function:
        return probe in listed
    return any(p.startswith(provider + "::") and p.endswith(":" + name) for p in listed)


def dtrace_version(dtrace: str) -> str:
    try:
        out = subprocess.run([dtrace, "-V"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.strip().replace("dtrace: ", "") or "unknown"


class DtraceSource(BpftraceSource):
    """BpftraceSource's pumps, stop handling (bye) and cleanup, around dtrace processes."""
    marked_stop = False     # dtrace is stopped by SIGINT (no libc probe in the D scripts)
    tracer = "dtrace"

    def __init__(self, target: Target, probes=DEFAULT_PROBES, tunables: dict | None = None, pools=None):
        self.target = target
        self.bpftrace = check_dtrace()          # the tracer binary the shared code runs
        self.pool = pools[0] if pools and len(pools) == 1 else ""
        listed = listed_probes(self.bpftrace)
        self.rendered, self.unavailable = [], {}
        for name in probes:
            text = d_script(name)
            missing = [p for p in required_probes(text) if not present(p, listed)]
            if missing:
                why = f"probe {name}: {', '.join(missing)} not in this kernel (dtrace -l -m zfs)"
                if name in REQUIRED_PROBES:
                    raise ZfsobsError(why + "; the metric cannot be traced here")
                self.unavailable[name] = why
                continue
            have = [p for p in script_probes(text) if present(p, listed)]
            self.rendered.append(Rendered(name, target, text, hashlib.sha256(text.encode()).hexdigest()[:16],
                                          have, [f"probe {p} absent" for p in script_probes(text) if p not in have]))
        self.meta = {
            "zfsobs": __version__, "host": platform.node(), "kernel": platform.release(),
            "source": "dtrace", "dtrace": dtrace_version(self.bpftrace), "target": target.describe(),
            "probes": {r.name: {"sha256": r.sha256, "functions": r.functions, "dropped": r.dropped}
                       for r in self.rendered},
            "unavailable": dict(self.unavailable), "tunables": dict(tunables or {}),
            "start_wall_ns": time.time_ns(), "start_mono_ns": time.monotonic_ns(),
        }
        self._runtime()

    def command(self, path: str) -> list[str]:
        """-Z: a probe this kernel lacks leaves its clause out (doctor names it) instead of failing;
        $$1 the pool filter, $2 the flush interval in seconds."""
        return command_line(self.bpftrace, path, self.pool)


def command_line(dtrace: str, path: str, pool: str = "", interval: int = 1) -> list[str]:
    return [dtrace, "-q", "-Z", "-s", path, pool, str(interval)]
