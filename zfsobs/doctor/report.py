"""`zfsobs doctor`: can this machine trace ZFS, and which metrics? One verdict line per metric."""
from __future__ import annotations

import glob
import os
import platform
import re
import shutil

from zfsobs import safe
from zfsobs.doctor import dtrace as doctor_dtrace, kstat as doctor_kstat, probe_load
from zfsobs.errors import FeatureAbsent, ZfsobsError
from zfsobs.labs.userland import BUILDS
from zfsobs.targets.platforms import uses_dtrace
from zfsobs.model.vdev_cache import ENABLE_HINT
from zfsobs.targets.offsets import offsets_origin
from zfsobs.targets.render import available, render
from zfsobs.sources.bpftrace_binary import bpftrace_path, bpftrace_version, too_old
from zfsobs.targets.target import Target, find_libraries, kernel, libzpool

OK, WARN, BAD = "ok", "warn", "FAIL"
# The bpftrace releases the lab tests run the probes with (tests/test_lab_bpftrace_versions.py), by
# the distribution that ships them; others between 0.17 and 0.27 are expected to work
# (docs/bpftrace-versions.md says what differs).
TESTED = {"0.17": "Debian 12", "0.23": "Debian 13", "0.27": "Debian sid"}
UNTESTED = "not a version zfsobs is tested with (0.17, 0.23, 0.27): docs/bpftrace-versions.md"


def tested(version: str) -> str:
    """'tested (Debian 13's)' for a release the lab tests run, else ''."""
    found = re.match(r"v?(\d+\.\d+)", version)
    distro = TESTED.get(found[1]) if found else None
    return f"tested ({distro}'s release)" if distro else ""


def grouped(dropped: list[str]) -> list[str]:
    """The renderer's notes with 'offset X unknown for T' merged into one note per target:
    'offsets unknown for T (N): X, Y, ...'."""
    names: dict[str, list[str]] = {}
    rest = []
    for note in sorted(set(dropped)):
        found = re.fullmatch(r"offset (.+) unknown for (.+)", note)
        if found:
            names.setdefault(found[2], []).extend(found[1].split(", "))
        else:
            rest.append(note)
    return rest + [f"offsets unknown for {target} ({len(set(n))}): {', '.join(sorted(set(n)))}"
                   for target, n in names.items()]


def checks(load: bool = False) -> tuple[list[tuple[str, str, str]], bool]:
    """(status, what, detail) rows, and whether anything can be traced. With `load`, each probe
    rendered for a target is also loaded with the bpftrace in use (zfsobs/doctor/probe_load.py: seconds
    per probe), and a metric whose probe it refuses is a failure with bpftrace's reason."""
    if uses_dtrace():     # illumos / FreeBSD (docs/illumos.md)
        return doctor_dtrace.checks()
    rows = []
    root = os.geteuid() == 0
    rows.append((OK if root else BAD, "root / BPF", "running as root" if root else
                 "not root: BPF tracing needs root (run with sudo); kstat mode needs none (below)"))
    bpftrace = bpftrace_path()
    version = bpftrace_version(bpftrace) if bpftrace else ""
    old = too_old(bpftrace, version) if bpftrace else ""
    rows.append((BAD if old or not bpftrace else OK if tested(version) else WARN, "bpftrace",
                 old or (f"{version} ({bpftrace}); {tested(version) or UNTESTED}" if bpftrace else
                         "not installed: ./scripts/setup or apt-get install bpftrace")))
    bpftrace = bpftrace if not old else None
    rows.append((OK if os.path.exists("/sys/kernel/btf/vmlinux") else WARN, "kernel BTF",
                 "/sys/kernel/btf/vmlinux" if os.path.exists("/sys/kernel/btf/vmlinux") else "absent"))
    uprobes = os.path.exists("/sys/bus/event_source/devices/uprobe")
    rows.append((OK if uprobes else BAD, "uprobes", f"kernel {platform.release()}" if uprobes else "not supported by this kernel"))
    kprobes = os.path.exists("/sys/bus/event_source/devices/kprobe")
    rows.append((OK if kprobes else WARN, "kprobes", "supported" if kprobes else "not supported (kernel targets cannot be traced)"))
    targets: list[Target] = []
    try:
        targets.append(kernel())
        t = targets[-1]
        rows.append((OK, "zfs module", f"OpenZFS {t.version}, module BTF {'yes' if t.btf else 'no'}"))
    except ZfsobsError as exc:
        rows.append((WARN, "zfs module", str(exc)))
    # the lab's private builds too (docs/lab.md): what each probe gives on OpenZFS 2.3
    private = [p for b in BUILDS.values() if b.libdir for p in sorted(glob.glob(os.path.join(b.libdir, "libzpool.so.*.*")))]
    for path in find_libraries() + private:
        try:
            t = libzpool(path)
            targets.append(t)
            rows.append((OK, "libzpool", f"{path} OpenZFS {t.version} build-id {t.build_id[:12] or '?'}"))
        except ZfsobsError as exc:
            rows.append((WARN, "libzpool", str(exc)))
    if not any(t.kind == "libzpool" for t in targets):
        rows.append((WARN, "libzpool", "none installed (userland lab unavailable): ./scripts/setup"))
    rows.append((OK if os.path.exists("/usr/sbin/ztest") else WARN, "ztest (lab)",
                 "/usr/sbin/ztest" if os.path.exists("/usr/sbin/ztest") else "not installed (package zfs-test)"))
    kstat = os.path.isdir("/proc/spl/kstat/zfs")
    rows.append((OK if kstat else WARN, "kstats", "/proc/spl/kstat/zfs readable" if kstat else "absent (no kernel ZFS)"))
    traceable = False
    loading: list[tuple[int, object, Target]] = []     # (row, rendered probe, target) to load
    for t in targets:
        usable = (t.kind == "libzpool" and uprobes) or (t.kind == "kernel" and kprobes)
        origin = offsets_origin(t)
        rows.append((WARN if origin.startswith("unknown") else OK, f"struct layout {t.kind} {t.version}", origin))
        for name in available():
            try:
                r = render(name, t, version)
            except FeatureAbsent as exc:      # a feature the release removed: a state, not a failure
                rows.append((WARN, f"metric {name} on {t.kind} {t.version}", f"absent: {exc}"))
                continue
            except ZfsobsError as exc:
                rows.append((BAD, f"metric {name} on {t.kind} {t.version}", str(exc)))
                continue
            state = OK if usable and root and bpftrace else WARN
            detail = f"probes {', '.join(r.functions)}"
            if r.dropped:
                detail += f"; partial: {'; '.join(grouped(r.dropped))}"
                state = WARN if state == OK else state
            if not (usable and root and bpftrace):
                detail = "traceable once the failures above are fixed; " + detail
            if name == "vdev_cache":
                detail = f"{vdev_cache_state(t)}; {detail}"
            if load and usable and root and bpftrace:
                loading.append((len(rows), r, t))
            rows.append((state, f"metric {name} on {t.kind} {t.version}", detail))
            traceable |= bool(usable and root and bpftrace)
    if loading:
        traceable = load_rows(rows, loading, bpftrace, version)
    if shutil.which("dtrace") and any(t.kind == "kernel" for t in targets):    # --tracer dtrace
        more, works = doctor_dtrace.checks(platform.system())
        rows += more
        traceable |= works
    return rows, traceable


def load_rows(rows: list, loading: list, bpftrace: str, version: str) -> bool:
    """Each probe in `loading` loaded with this bpftrace: its metric row says whether it loads,
    one row says how they were loaded. True if a txg probe (the backbone) loads."""
    verdicts = probe_load.check(bpftrace, [(r, t) for _, r, t in loading], version=version)
    for (i, _, _), why in zip(loading, verdicts):
        state, what, detail = rows[i]
        if why:
            rows[i] = (BAD, what, f"bpftrace {version} refuses it: {why}; {detail}")
        else:
            rows[i] = (state, what, f"loads with bpftrace {version}; {detail}")
    refused = sum(1 for why in verdicts if why)
    rows.append((WARN if refused else OK, "probes load",
                 f"{len(verdicts) - refused} of {len(verdicts)} with bpftrace {version} "
                 f"({probe_load.how(version)})"))
    return any(not why for (_, r, _), why in zip(loading, verdicts) if r.name == "txg")


def vdev_cache_state(t: Target) -> str:
    """active / disabled, as far as it can be known before tracing: the kernel's module parameter
    (fixed at load), or for libzpool the default each process starts with (-o can change it)."""
    if t.kind == "kernel":
        try:
            with open("/sys/module/zfs/parameters/zfs_vdev_cache_size") as f:
                size = int(f.read().strip() or 0)
        except (OSError, ValueError):
            return "zfs_vdev_cache_size unreadable"
        return f"active: zfs_vdev_cache_size={size}" if size > 0 else f"disabled: zfs_vdev_cache_size=0; {ENABLE_HINT}"
    return ("disabled by default (zfs_vdev_cache_size=0) in each process; a process started with "
            "-o zfs_vdev_cache_size=N has it on (the live view shows which)")


def run(out, load: bool = True) -> int:
    rows, traceable = checks(load=load)
    kstat = False
    if not uses_dtrace():
        more, kstat = doctor_kstat.rows(traceable)
        rows += more
    for status, what, detail in rows:
        # paths, versions and the tracer's refusals, as the machine gave them: shown, not sent
        out.write(safe.text(f"{status:<5} {what:<32} {detail}") + "\n")
    if traceable:
        out.write("verdict: tracing works here\n")
    elif kstat:
        out.write("verdict: nothing can be traced here; kstat mode works (fewer fields, no root: docs/kstat.md)\n")
    else:
        out.write("verdict: nothing can be traced here\n")
    return 0 if traceable or kstat else 1
