"""Does each rendered probe load with the bpftrace in use? (`zfsobs doctor`; docs/bpftrace-versions.md)

bpftrace 0.22 and later: `bpftrace --dry-run SCRIPT` parses, type-checks and compiles the script,
loads every program into the kernel (the verifier's verdict: stack limit, per-CPU loops), runs
BEGIN, attaches every probe, then detaches and exits; no event is read and END does not run.
Older releases (0.17 to 0.21) have no --dry-run: the script runs with one more probe that exits
at once (interval:ms:1), which the loop reads only once every probe is attached; END runs.

Either way the probes are attached for a moment. A libzpool target's script is checked on a private
copy of the library (uprobes are per inode): the same programs, the same symbol offsets, and no
process that uses the library runs one of them. A kernel target's kprobes are the zfs module's own:
attached and detached at once on 0.22+, for about a second before 0.22 (the events are never read).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from zfsobs.targets.render import Rendered
from zfsobs.sources.bpftrace_binary import run_flags
from zfsobs.sources.bpftrace_child import NOISE, bpftrace_env, child_setup
from zfsobs.targets.target import Target

DRY_RUN = (0, 22)          # the first release with --dry-run
TIMEOUT_S = 300            # vdev_queue compiles in ~5 s on 2 busy cores, ~10x that under the kernel lab's TCG
EXIT_AT_ONCE = "\ninterval:ms:1\n{\n\texit();\n}\n"
PREFIX = "zfsobs-probe-load-"


def has_dry_run(version: str) -> bool:
    found = re.match(r"v?(\d+)\.(\d+)", version or "")
    return bool(found) and (int(found[1]), int(found[2])) >= DRY_RUN


def how(version: str) -> str:
    """How the probes were loaded with this release, as doctor says it."""
    if has_dry_run(version):
        done = "--dry-run: compiled, loaded into the kernel (its verifier), attached and detached"
    else:
        done = ("run and stopped at once (no --dry-run before 0.22): compiled, loaded into the kernel "
                "(its verifier), attached, END run")
    return done + "; libzpool probes on a private copy of the library"


def reason(stderr: str, code: int | None) -> str:
    """bpftrace's first error line, without the chatter zfsobs ignores when it runs the probes."""
    lines = [l.strip() for l in stderr.splitlines() if l.strip() and not any(n in l for n in NOISE)]
    errors = [l for l in lines if "ERROR" in l or "rror" in l]
    text = (errors or lines or [f"exit status {code}"])[0]
    return text[:300]


def _script(tmp: str, i: int, rendered: Rendered, target: Target, copies: dict[str, str], dry: bool) -> str:
    text = rendered.text
    if target.kind == "libzpool" and target.path:
        if target.path not in copies:
            where = os.path.join(tmp, f"lib{len(copies)}")
            os.mkdir(where)
            copies[target.path] = shutil.copy2(target.path, os.path.join(where, os.path.basename(target.path)))
        text = text.replace(target.path, copies[target.path])
    path = os.path.join(tmp, f"{i}-{rendered.name}.bt")
    with open(path, "w") as f:
        f.write(text if dry else text + EXIT_AT_ONCE)
    return path


def _start(bpftrace: str, script: str, dry: bool, flags: list[str], map_keys: int) -> subprocess.Popen:
    cmd = [bpftrace, *flags] + (["--dry-run"] if dry else []) + [script]
    with open(script + ".err", "w") as err:      # a file: a verifier's refusal can be pages long
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
                                env=bpftrace_env(map_keys), preexec_fn=child_setup, start_new_session=True)


def _verdict(proc: subprocess.Popen, script: str) -> str:
    if proc.returncode == 0:
        return ""
    with open(script + ".err", errors="replace") as f:
        return reason(f.read(), proc.returncode)


def check(bpftrace: str, items: list[tuple[Rendered, Target]], version: str) -> list[str]:
    """For each (rendered probe, its target): '' if it loads with this bpftrace, else bpftrace's
    reason. The scripts load side by side, one per CPU."""
    if not items:
        return []
    dry = has_dry_run(version)
    tmp = tempfile.mkdtemp(prefix=PREFIX)
    running: dict[int, tuple[subprocess.Popen, float]] = {}
    try:
        copies: dict[str, str] = {}
        scripts = [_script(tmp, i, r, t, copies, dry) for i, (r, t) in enumerate(items)]
        verdicts: list[str | None] = [None] * len(scripts)
        waiting = list(range(len(scripts)))
        while waiting or running:
            while waiting and len(running) < (os.cpu_count() or 2):
                i = waiting.pop(0)
                flags = run_flags(version, items[i][1].kind == "kernel")     # as the probes will run
                running[i] = (_start(bpftrace, scripts[i], dry, flags, items[i][0].map_keys), time.monotonic())
            time.sleep(0.05)
            for i, (proc, began) in list(running.items()):
                if proc.poll() is not None:
                    verdicts[i] = _verdict(proc, scripts[i])
                elif time.monotonic() - began > TIMEOUT_S:
                    _kill(proc)
                    verdicts[i] = f"no answer from bpftrace within {TIMEOUT_S} s"
                else:
                    continue
                del running[i]
        return [v or "" for v in verdicts]
    finally:
        for proc, _ in running.values():      # an interrupted doctor leaves no bpftrace behind
            _kill(proc)
        shutil.rmtree(tmp, ignore_errors=True)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
