"""The live source on illumos and FreeBSD, and on Linux with `--tracer dtrace` (Oracle's DTrace
2.x, the kernel's zfs module): one `dtrace -q -s` per D script (probes/illumos/, as
zfsobs/targets/d_render.py renders it for this system), the same interface and line handling as
BpftraceSource (start, poll, finish, close, attached, ended, meta, unavailable, dropped_at_stop),
so capture, replay, report and the views are unchanged. make_source() picks the tracer."""
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
from zfsobs.sources.dtrace_libs import failing_library, trimmed
from zfsobs.targets.d_render import D_DIRS, for_system, script_text, variants
from zfsobs.targets.platforms import uses_dtrace
from zfsobs.targets.probe_files import probes_dir
from zfsobs.targets.render import Rendered, _header_list, header
from zfsobs.sources.bpftrace import DEFAULT_PROBES, REQUIRED_PROBES, BpftraceSource
from zfsobs.sources.bpftrace_binary import check_tracing
from zfsobs.targets.offsets import offsets_for
from zfsobs.targets.target import Target

_LIST_RE = re.compile(r"^\s*\d+\s+(\S+)\s+(\S+)\s+(\S*)\s+(\S+)\s*$")


def make_source(target: Target, probes=DEFAULT_PROBES, tunables: dict | None = None, pools=None,
                mode: str = "auto", tracer: str = "auto"):
    """dtrace on illumos/FreeBSD or when `tracer` says so, bpftrace elsewhere; `pools`: one pool
    name is filtered in D too. mode kstat: ZFS's own counters (zfsobs/sources/kstat.py); auto:
    those when tracing cannot run here (no root, no bpftrace) and the kernel's kstats can be read."""
    from zfsobs.sources.kstat import KstatSource
    if mode == "kstat":
        return KstatSource(target, probes, tunables, pools, why="--source kstat")
    if tracer == "dtrace" or (tracer == "auto" and uses_dtrace()):
        return DtraceSource(target, probes, tunables, pools)
    if tracer == "bpftrace" and uses_dtrace():
        raise ZfsobsError("--tracer bpftrace: bpftrace runs on Linux; here zfsobs traces with dtrace")
    if mode == "auto" and target.kind == "kernel":
        try:
            check_tracing()
        except ZfsobsError as exc:
            return KstatSource(target, probes, tunables, pools, why=str(exc))
    return BpftraceSource(target, probes, tunables)


def d_script(name: str, system: str | None = None) -> str:
    """Metric NAME's first D script (illumos's) as SYSTEM (default: this one) runs it."""
    found = variants(name)
    if not found:
        raise ZfsobsError(f"no D script {name!r} in {', '.join(D_DIRS)} of {probes_dir()}")
    return for_system(script_text(found[0]), system)


def choose(name: str, listed: set[str], system: str | None = None, constants=None) -> tuple[str, str]:
    """(metric NAME's first D script whose required probes this kernel has, as SYSTEM runs it, '')
    or ('', why none can run). `constants`: a callable giving the module's flag values."""
    whys = []
    for path in variants(name):
        text = for_system(script_text(path), system)
        missing = [p for p in required_probes(text) if not present(p, listed)]
        if missing:
            absent = header(text, "Absent")      # what a missing one means
            whys.append(f"{path.parent.name}/{path.name} needs {', '.join(missing)}"
                        + (f": {absent}" if absent else ""))
            continue
        try:
            return for_system(text, system, constants), ""
        except ZfsobsError as exc:
            whys.append(f"{path.parent.name}/{path.name}: {exc}")
    return "", f"probe {name}: not in this kernel (dtrace -l -m zfs): {'; '.join(whys) or 'no D script'}"


def required_probes(text: str) -> list[str]:
    return _header_list(text, "Requires")


def script_probes(text: str) -> list[str]:
    return _header_list(text, "Probes")


def check_dtrace() -> str:
    """The dtrace binary, or a one-line reason why tracing cannot run here. On Linux it must be
    Oracle's DTrace 2.x (systemtap's SDT header tool is also called dtrace)."""
    path = shutil.which("dtrace") or next((p for p in ("/usr/sbin/dtrace", "/usr/bin/dtrace") if os.path.exists(p)), None)
    if not path:
        if platform.system() == "Linux":
            raise ZfsobsError("dtrace not found: --tracer dtrace needs Oracle's DTrace 2.x (Debian sid: "
                              "apt-get install dtrace); bpftrace is zfsobs's tracer on Linux")
        raise ZfsobsError("dtrace not found: on FreeBSD kldload dtraceall; on illumos it is /usr/sbin/dtrace")
    if platform.system() == "Linux":
        version = dtrace_version(path)
        m = re.search(r"\bD (\d+)\.", version)
        if not m or int(m.group(1)) < 2:
            raise ZfsobsError(f"{path} is not DTrace 2.x ({version!r}): zfsobs needs Oracle's DTrace for Linux")
    return path


# Minutes under software emulation (BTF to CTF of the kernel and its modules at every start).
LIST_TIMEOUT = 600


def listed_probes(dtrace: str, options: tuple[str, ...] = ()) -> set[str]:
    """Every probe of the zfs module as provider::function:name, from `dtrace -l -m zfs`; raises
    with the reason when dtrace cannot list (privileges; LibraryFailed for its own libraries)."""
    try:
        done = subprocess.run([dtrace, *options, "-l", "-m", "zfs"], capture_output=True, text=True,
                              timeout=LIST_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ZfsobsError(f"{dtrace} -l failed: {exc}") from None
    if done.returncode != 0 and not done.stdout:
        reason = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        libdir = failing_library(done.stderr)
        if libdir:
            raise LibraryFailed(libdir, reason)
        raise ZfsobsError(f"dtrace cannot list probes: {reason} (run as root, or on illumos grant "
                          "dtrace_kernel: usermod -K defaultpriv=basic,dtrace_kernel USER)")
    out = set()
    for line in done.stdout.splitlines():
        m = _LIST_RE.match(line)
        if m:
            provider = re.sub(r"\d+$", "", m.group(1))   # sdt probes may carry a pid suffix elsewhere
            out.add(f"{provider}::{m.group(3)}:{m.group(4)}")
    return out


class LibraryFailed(ZfsobsError):
    """One of dtrace's own D libraries does not compile on this kernel (zfsobs/sources/dtrace_libs.py)."""
    def __init__(self, libdir: str, reason: str):
        super().__init__(f"dtrace's own D libraries fail on this kernel: {reason}")
        self.libdir = libdir


def dtrace_options(dtrace: str) -> tuple[tuple[str, ...], set[str], str]:
    """(options every dtrace run needs here, the zfs module's probes, a note for the header): a
    library directory trimmed to what compiles when dtrace's own fails on this kernel."""
    try:
        return (), listed_probes(dtrace), ""
    except LibraryFailed as exc:
        libdir = trimmed(exc.libdir)
        options = (f"-xsyslibdir={libdir}",)
        return options, listed_probes(dtrace, options), f"{exc}; using {libdir} (its translators left out)"


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
    # "dtrace: 12 drops on CPU 0", "... dynamic variable drops", "... aggregation drops on CPU 1": a
    # record, a variable or an aggregation key the kernel had no room for; "dtrace: error on enabled
    # probe ...": a clause that stopped at a bad read (one firing's counts). On stderr.
    lost_re = re.compile(r"^dtrace: (?:(\d+) (?:[a-z ]+ )?drops?\b|error on enabled probe)")

    def __init__(self, target: Target, probes=DEFAULT_PROBES, tunables: dict | None = None, pools=None):
        if target.kind != "kernel":
            raise ZfsobsError(f"--tracer dtrace traces the kernel's zfs module, not {target.name} "
                              "(the userland lab is traced with bpftrace)")
        self.target = target
        self.bpftrace = check_dtrace()          # the tracer binary the shared code runs
        self.pool = pools[0] if pools and len(pools) == 1 else ""
        self.options, listed, libs = dtrace_options(self.bpftrace)
        self.rendered, self.unavailable = [], {}
        for name in probes:
            text, why = choose(name, listed, constants=lambda: offsets_for(target))
            if why:
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
        if libs:
            self.meta["dtrace_libs"] = libs
        self._runtime()

    def command(self, path: str) -> list[str]:
        """-Z: a probe this kernel lacks leaves its clause out (doctor names it) instead of failing;
        $$1 the pool filter, $2 the flush interval in seconds."""
        return command_line(self.bpftrace, path, self.pool, options=self.options)


def command_line(dtrace: str, path: str, pool: str = "", interval: int = 1, options=()) -> list[str]:
    return [dtrace, *options, "-q", "-Z", "-s", path, pool, str(interval)]
