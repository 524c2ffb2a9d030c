"""`zfsobs lab`: the userland lab, `lab set` (a tunable in a running lab) and the kernel lab
(`lab --kernel`), for zfsobs/cli.py, which turns their errors into one line."""
from __future__ import annotations

import os
import shlex
import sys
import time

from zfsobs.cli_parser import after_dashes
from zfsobs.errors import ZfsobsError
from zfsobs.signals import Terminated


def run(args) -> int:
    if args.command[:1] == ["set"] and not args.kernel:
        return _lab_set(args.command[1:])
    if args.command[:1] not in ([], ["--"]):
        raise ZfsobsError(f"lab: unknown argument {args.command[0]!r} "
                          "(lab set NAME=VALUE ..., or lab --kernel -- CMD ...)")
    return _kernel_lab(args) if args.kernel else _lab(args)


def _kernel_lab(args) -> int:
    from zfsobs.labs.kernel import DEFAULT_TIMEOUT, KernelLab
    from zfsobs.signals import raise_on_termination
    given = [f for f, v in (("--duration", args.duration), ("--zfs", args.zfs)) if v]
    if given:
        raise ZfsobsError(f"lab --kernel does not take {', '.join(given)} (userland lab only)")
    if args.list:
        return _kernel_images()
    command = after_dashes(args.command, "lab --kernel")
    lab = KernelLab(command, layout=args.layout or "mirror-log", disk_size=args.disk_size or "2G",
                    timeout=args.timeout or DEFAULT_TIMEOUT, console=args.console,
                    options=args.option, shares=args.share, workload=args.workload or "mix", btf=args.btf,
                    distro=args.distro or "bookworm", possible_cpus=args.possible_cpus)
    raise_on_termination()
    try:
        return lab.run()
    except (KeyboardInterrupt, Terminated) as exc:
        print("zfsobs: kernel lab: interrupted; guest powered off, temp files removed", file=sys.stderr)
        return 130 if isinstance(exc, KeyboardInterrupt) else 143


def _kernel_images() -> int:
    """lab --kernel --list: each image of this recipe, built or not, and what it holds."""
    from zfsobs.labs.guest import builder_command, images
    for row in images():
        pk = row["packages"]
        held = (f"kernel {pk.get('kernel', '?')}, zfs-dkms {pk.get('zfs-dkms', '?')}, "
                f"bpftrace {pk.get('bpftrace', '?')}") if row["built"] else row["about"]
        how = f"--distro {row['distro']}" + (" --btf" if row["flavour"] == "btf" else "")
        state = "built" if row["built"] else "not built (" + shlex.join(builder_command(row["flavour"], row["distro"])) + ")"
        print(f"{how:<28} {state}: {held}\n{'':<28} {row['dir']}")
    return 0


def _lab(args) -> int:
    given = [f for f, v in (("--layout", args.layout), ("--disk-size", args.disk_size),
                            ("--timeout", args.timeout), ("--console", args.console),
                            ("--share", args.share), ("--btf", args.btf), ("--distro", args.distro),
                            ("--possible-cpus", args.possible_cpus),
                            ("--list", args.list), ("-- CMD", args.command)) if v]
    if given:
        raise ZfsobsError(f"lab: {', '.join(given)}: only with --kernel")
    from zfsobs.labs.userland import Lab
    from zfsobs.preflight import check_lab_options
    from zfsobs.signals import raise_on_termination
    raise_on_termination()
    lab = Lab(duration=args.duration, options=args.option, preset=args.workload or "default", zfs=args.zfs)
    check_lab_options(lab)
    try:
        lab.start()
        print(f"zfsobs: lab running: ztest pid {lab.proc.pid} on {lab.target.name}, files in {lab.dir}"
              f"; trace it with: zfsobs top --target {lab.target.path}", file=sys.stderr)
        deadline = time.monotonic() + args.duration if args.duration else None
        while lab.alive() and (deadline is None or time.monotonic() < deadline):
            time.sleep(0.5)
        failure = lab.failure()
        if failure:
            raise ZfsobsError(failure)
    except (KeyboardInterrupt, Terminated):
        pass
    finally:
        lab.stop()
    print("zfsobs: lab stopped, files removed", file=sys.stderr)
    return 0


def _lab_set(words: list[str]) -> int:
    """lab set NAME=VALUE ... [--pid PID]: the words after `set` (argparse's REMAINDER)."""
    from zfsobs.labs.knob import lab_set
    pid = None
    if "--pid" in words:
        i = words.index("--pid")
        if i + 1 >= len(words) or not words[i + 1].isdigit():
            raise ZfsobsError("lab set: --pid needs a process id")
        pid = int(words[i + 1])
        words = words[:i] + words[i + 2:]
    if not words:
        raise ZfsobsError("lab set NAME=VALUE [NAME=VALUE ...] [--pid PID]: which tunable?")
    if os.geteuid() != 0:
        raise ZfsobsError("lab set writes the lab process's memory: run it as root")
    for word in words:
        print(f"zfsobs: {lab_set(word, pid)}", file=sys.stderr)
    return 0
