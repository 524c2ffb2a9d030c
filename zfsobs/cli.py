"""Command line: argument parsing and dispatch. Every user-facing failure is one line, no traceback."""
from __future__ import annotations

import argparse
import os
import sys
import time

from zfsobs import __version__
from zfsobs.errors import ZfsobsError


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def _target_args(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--lab", action="store_true",
                       help="start the bundled userland ZFS lab (ztest) and trace it")
    where.add_argument("--target", metavar="T",
                       help="kernel | libzpool | libzpool:PATH | PATH (default: kernel if loaded)")
    p.add_argument("-o", "--option", action="append", default=[], metavar="NAME=VALUE",
                   help="with --lab: a ZFS tunable for the lab's ztest (repeatable)")
    p.add_argument("--workload", default="default", metavar="W",
                   help="with --lab: default, or zil (one dataset, 16 KiB log blocks: a busier ZIL)")
    _zfs_arg(p, "with --lab: ")
    p.add_argument("--lab-time", type=_positive, metavar="S",
                   help="with --lab: ztest runs S seconds and ends by itself, which ends the session "
                        "(a clean end: every commit and txg in flight completes)")
    p.add_argument("--source", choices=("auto", "trace", "kstat"), default="auto",
                   help="trace (bpftrace as root), kstat (ZFS's own counters, no root; fewer fields: "
                        "docs/kstat.md), or auto: trace if it can run here, else kstat (the header says which)")
    p.add_argument("-p", "--pool", action="append", default=[], metavar="POOL",
                   help="only this pool (repeatable; default: all pools)")


def _zfs_arg(p: argparse.ArgumentParser, scope: str = "") -> None:
    # validated by the lab (one-line error listing the builds), not by argparse's choices
    p.add_argument("--zfs", metavar="V", help=f"{scope}the OpenZFS to run: 2.1 (installed; the default) "
                   "or 2.3 (scripts/setup's private copy, docs/lab.md)")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="zfsobs", description="Live ZFS internals: txg sync, ZIL, "
                                 "vdev queue, vdev_cache.")
    ap.add_argument("--version", action="version", version=f"zfsobs {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = sub.add_parser("top", help="live view (line mode when stdout is not a terminal)")
    _target_args(p)
    p.add_argument("--interval", type=_positive, default=1.0, metavar="S", help="refresh every S seconds (default 1)")
    p.add_argument("--record", metavar="FILE", help="also record the stream to FILE")
    p.add_argument("--force", action="store_true", help="overwrite an existing --record FILE")
    p.add_argument("--duration", type=_positive, metavar="S", help="stop after S seconds")
    p.add_argument("-s", "--separator", metavar="SEP", help="line mode: separate columns with SEP")

    p = sub.add_parser("record", help="record the event stream to a capture file")
    _target_args(p)
    p.add_argument("-O", "--output", "--out", dest="record", required=True, metavar="FILE")
    p.add_argument("--force", action="store_true", help="overwrite an existing FILE")
    p.add_argument("--duration", type=_positive, metavar="S", help="stop after S seconds")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ...: record until CMD exits")

    p = sub.add_parser("zilstat", help="ZIL traffic in zilstat's columns, per interval or per txg")
    _target_args(p)
    p.add_argument("-t", dest="timestamps", action="store_true", help="print a time column")
    p.add_argument("-M", dest="megabytes", action="store_true", help="MB (10^6 bytes) instead of bytes")
    p.add_argument("-l", dest="linecount", type=int, default=0, metavar="N", help="repeat the header every N lines")
    p.add_argument("--record", metavar="FILE", help="also record the stream to FILE")
    p.add_argument("--force", action="store_true", help="overwrite an existing --record FILE")
    p.add_argument("interval", nargs="?", default="1", help="seconds, or 'txg' for one line per txg (default 1)")
    p.add_argument("count", nargs="?", type=int, help="stop after COUNT lines")

    p = sub.add_parser("vqstat", help="vdev queue depth in zpool iostat -q's columns, time-weighted per interval")
    _target_args(p)
    p.add_argument("-v", dest="verbose", action="store_true", help="a line per leaf vdev too")
    p.add_argument("--max", dest="peak", action="store_true", help="the highest depth in each interval, not the mean")
    p.add_argument("-t", dest="timestamps", action="store_true", help="print a time column")
    p.add_argument("--record", metavar="FILE", help="also record the stream to FILE")
    p.add_argument("--force", action="store_true", help="overwrite an existing --record FILE")
    p.add_argument("interval", nargs="?", type=_positive, default=1.0, help="seconds (default 1)")
    p.add_argument("count", nargs="?", type=int, help="stop after COUNT intervals")

    p = sub.add_parser("replay", help="replay a capture through the live view")
    p.add_argument("file")
    p.add_argument("--speed", type=_positive, default=1.0, metavar="X")

    p = sub.add_parser("report", help="summarise a capture")
    p.add_argument("file")
    p.add_argument("--format", choices=("text", "json", "csv"), default="text")
    p.add_argument("--section", default="txgs", help="csv: which table (default txgs)")
    p.add_argument("--compare", action="store_true", help="split the capture at tunable changes: per metric "
                   "before/after mean, p99 and their ratio (docs/tuning.md)")

    p = sub.add_parser("lab", help="run the userland ZFS lab (ztest) in the foreground, "
                       "or with --kernel a command in a guest with the zfs module")
    p.add_argument("--duration", type=_positive, metavar="S", help="stop after S seconds")
    p.add_argument("--workload", metavar="W", help="default, or zil (a busier ZIL); with --kernel: mix "
                   "(70/30 8k, the default), sync-write, random-read or none")
    _zfs_arg(p)
    p.add_argument("-o", "--option", action="append", default=[], metavar="NAME=VALUE",
                   help="a ZFS tunable: for ztest, or with --kernel a zfs module parameter set at load")
    p.add_argument("--kernel", action="store_true", help="the kernel lab: run -- CMD ... in a QEMU guest "
                   "with OpenZFS's kernel module and pool zfsobs_klab (docs/kernel-lab.md)")
    p.add_argument("--layout", help="with --kernel: mirror-log (default), mirror or single")
    p.add_argument("--disk-size", metavar="SIZE", help="with --kernel: each data disk (default 2G, sparse)")
    p.add_argument("--timeout", type=_positive, metavar="S", help="with --kernel: wall-clock limit "
                   "(default 3600 s)")
    p.add_argument("--console", action="store_true", help="with --kernel: copy the guest console to stderr")
    p.add_argument("--share", action="append", default=[], metavar="DIR",
                   help="with --kernel: a host directory the guest can write, at the same path (repeatable)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="with --kernel: -- CMD ... to run in the guest; "
                   "without: `set NAME=VALUE [--pid PID]` changes a tunable in the running lab (docs/tuning.md)")

    p = sub.add_parser("probes", help="list probe scripts, or show one rendered for a target")
    p.add_argument("action", choices=("list", "show"))
    p.add_argument("name", nargs="?")
    p.add_argument("--target", metavar="T", default="libzpool")

    sub.add_parser("doctor", help="check what can be traced here")
    return ap


def _fix_record_args(argv: list[str]) -> list[str]:
    # `record -o FILE` is the documented spelling; -o is the lab's tunable flag elsewhere.
    if argv and argv[0] == "record":
        head, sep, tail = _split_command(argv)
        if head.count("-o") > 1 or ("-o" in head and {"-O", "--output", "--out"} & set(head)):
            raise ZfsobsError("record: -o names the output file; give lab tunables with --option NAME=VALUE")
        head = ["--output" if a == "-o" else a for a in head]
        return head + sep + tail
    return argv


def _split_command(argv):
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], ["--"], argv[i + 1:]
    return argv, [], []


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = parser()
    try:
        args = ap.parse_args(_fix_record_args(argv))
        return _dispatch(args)
    except ZfsobsError as exc:
        print(f"zfsobs: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # stdout closed (e.g. piped into head): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _dispatch(args) -> int:
    cmd = args.cmd
    if cmd == "record":
        # with both a command and --duration, whichever ends first stops the recording
        args.command = [a for a in args.command if a != "--"] if args.command else []
        return _record(args)
    if cmd == "top":
        return _top(args)
    if cmd == "zilstat":
        return _zilstat(args)
    if cmd == "vqstat":
        return _vqstat(args)
    if cmd in ("replay", "report"):
        from zfsobs.capture import read_capture
        capture = read_capture(args.file)
        for warning in capture.warnings:
            print(f"zfsobs: warning: {args.file}: {warning}", file=sys.stderr)
        if cmd == "report":
            from zfsobs.views import report
            if args.compare:
                from zfsobs.views import compare
                sys.stdout.write(compare.render(capture, args.format))
                return 0
            if args.format == "csv" and args.section not in report.SECTIONS:
                raise ZfsobsError(f"no section {args.section!r} (have: {', '.join(report.SECTIONS)})")
            sys.stdout.write(report.render(capture, args.format, args.section))
            return 0
        return _replay(capture, args)
    if cmd == "lab":
        if args.command[:1] == ["set"] and not args.kernel:
            return _lab_set(args.command[1:])
        return _kernel_lab(args) if args.kernel else _lab(args)
    if cmd == "probes":
        return _probes(args)
    if cmd == "doctor":
        from zfsobs import doctor
        return doctor.run(sys.stdout)
    raise ZfsobsError(f"unknown command {cmd}")


def _top(args) -> int:
    from rich.console import Console
    from zfsobs.session import Session
    from zfsobs.views.lines import TxgLines
    # ZFSOBS_TTY: the kernel lab's guest writes to the host's terminal through a serial port
    forced = os.environ.get("ZFSOBS_TTY") == "1"
    tty = sys.stdout.isatty() or forced
    with Session(args) as session:
        if tty:
            from zfsobs.views.live import run_live
            run_live(session, Console(force_terminal=True) if forced else Console())
        else:
            session.pipeline.listeners.append(TxgLines(session.source.meta, sep=args.separator))
            session.run(tick=args.interval)
    if _probe_died(session):
        return 1
    if session.reason and session.reason not in ("quit", "duration reached") and not session.reason.startswith("interrupted"):
        print(f"zfsobs: stopped: {session.reason}", file=sys.stderr)
    return 0


def _zilstat(args) -> int:
    from zfsobs.session import Session
    from zfsobs.views.zilstat import Zilstat
    interval = None if args.interval == "txg" else _positive_or_error(args.interval)
    if args.count is not None and args.count < 1:
        raise ZfsobsError(f"count must be >= 1: {args.count}")
    args.duration = None
    with Session(args) as session:
        zs = Zilstat(session.model, session.source.meta, interval, args.count, args.timestamps,
                     args.megabytes, pool_column=len(args.pool) != 1, header_every=args.linecount)
        session.pipeline.listeners.append(zs.on_event)
        session.run(on_tick=zs.on_tick, tick=0.2)
        if not session.reason.startswith(("interrupted", "terminated")):
            zs.finish()
    if session.reason not in ("quit", "") and not session.reason.startswith("interrupted"):
        print(f"zfsobs: stopped: {session.reason}", file=sys.stderr)
    return 0


def _vqstat(args) -> int:
    from zfsobs.session import Session
    from zfsobs.views.vqstat import Vqstat
    if args.count is not None and args.count < 1:
        raise ZfsobsError(f"count must be >= 1: {args.count}")
    args.duration = None
    with Session(args) as session:
        if "vdev_queue" in session.source.unavailable:
            raise ZfsobsError(session.source.unavailable["vdev_queue"])
        vq = Vqstat(session.model, session.source.meta, args.interval, args.count, args.verbose,
                    args.peak, args.timestamps)
        session.run(on_tick=vq.on_tick, tick=0.2)
    if session.reason not in ("quit", "") and not session.reason.startswith("interrupted"):
        print(f"zfsobs: stopped: {session.reason}", file=sys.stderr)
    return 0


def _positive_or_error(text: str) -> float:
    try:
        return _positive(text)
    except argparse.ArgumentTypeError as exc:
        raise ZfsobsError(f"interval: {exc} (seconds, or 'txg')") from None


def _record(args) -> int:
    from zfsobs.session import Session
    started = time.monotonic()
    with Session(args) as session:
        kstat = session.source.meta.get("kstat")
        if kstat:
            print(f"zfsobs: kstat mode ({kstat['why']}): ZFS's own counters, fewer fields (docs/kstat.md)",
                  file=sys.stderr)
        for name, why in session.source.unavailable.items():     # e.g. too many CPUs for a probe
            print(f"zfsobs: {name} not traced: {why}", file=sys.stderr)
        print(f"zfsobs: recording {session.source.target.name} to {args.record}"
              + (f" for {args.duration:g} s" if args.duration else "")
              + (" (Ctrl-C stops)" if sys.stdin.isatty() else ""), file=sys.stderr)
        session.run(tick=0.5)
    parser = session.pipeline.parser
    txgs = sum(p.total for p in session.model.txg.pools.values())
    print(f"zfsobs: recorded {session.pipeline.kept} events ({txgs} txgs, {parser.malformed} malformed, "
          f"{session.model.lost} lost) in {time.monotonic() - started:.1f} s to {args.record} "
          f"({session.capture.bytes} bytes); stopped: {session.reason}", file=sys.stderr)
    cost = session.cost.totals()
    tracers = sum(v["cpu_s"] for v in cost.values() if isinstance(v, dict))
    print(f"zfsobs: cost: zfsobs {cost['zfsobs_cpu_s']:.1f} CPU-s, {session.source.tracer} {tracers:.1f} CPU-s "
          f"in {cost['seconds']:.0f} s (the probes' own run time: see docs/performance.md)", file=sys.stderr)
    return 1 if _probe_died(session) else 0


def _probe_died(session) -> bool:
    """A probe's bpftrace ended under the session (killed, crashed): the capture is closed and
    valid, but the run is cut short, so the exit status says so."""
    if session.source.ended and session.reason == session.source.ended:
        print(f"zfsobs: error: {session.reason}", file=sys.stderr)
        return True
    return False


def _replay(capture, args) -> int:
    if sys.stdout.isatty():
        from rich.console import Console
        from zfsobs.views.replay import run_replay
        run_replay(capture, Console(), args.speed)
        return 0
    from zfsobs.events import Parser, parse_all
    from zfsobs.views.lines import TxgLines
    lines = TxgLines(capture.meta)
    for ev in parse_all(capture.lines, Parser()):
        lines(ev)
    return 0


def _kernel_lab(args) -> int:
    from zfsobs.kernel_lab import DEFAULT_TIMEOUT, KernelLab
    from zfsobs.signals import Terminated, raise_on_termination
    given = [f for f, v in (("--duration", args.duration), ("--zfs", args.zfs)) if v]
    if given:
        raise ZfsobsError(f"lab --kernel does not take {', '.join(given)} (userland lab only)")
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    lab = KernelLab(command, layout=args.layout or "mirror-log", disk_size=args.disk_size or "2G",
                    timeout=args.timeout or DEFAULT_TIMEOUT, console=args.console,
                    options=args.option, shares=args.share, workload=args.workload or "mix")
    raise_on_termination()
    try:
        return lab.run()
    except (KeyboardInterrupt, Terminated) as exc:
        print("zfsobs: kernel lab: interrupted; guest powered off, temp files removed", file=sys.stderr)
        return 130 if isinstance(exc, KeyboardInterrupt) else 143


def _lab(args) -> int:
    given = [f for f, v in (("--layout", args.layout), ("--disk-size", args.disk_size),
                            ("--timeout", args.timeout), ("--console", args.console),
                            ("--share", args.share), ("-- CMD", args.command)) if v]
    if given:
        raise ZfsobsError(f"lab: {', '.join(given)}: only with --kernel")
    from zfsobs.lab import Lab
    from zfsobs.signals import Terminated, raise_on_termination
    raise_on_termination()
    lab = Lab(duration=args.duration, options=args.option, preset=args.workload or "default", zfs=args.zfs)
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
    from zfsobs.lab_knob import lab_set
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


def _probes(args) -> int:
    from zfsobs import probes
    from zfsobs.platforms import uses_dtrace
    where = "illumos" if uses_dtrace() else "linux"     # illumos and FreeBSD run the D scripts
    if args.action == "list":
        for name in probes.available(where):
            print(name)
        return 0
    if not args.name:
        raise ZfsobsError("probes show NAME: which probe? (" + ", ".join(probes.available(where)) + ")")
    if where == "illumos":
        from zfsobs.dtrace_source import d_script
        sys.stdout.write(d_script(args.name))
        return 0
    from zfsobs.targets import resolve
    rendered = probes.render(args.name, resolve(args.target))
    sys.stdout.write(rendered.text)
    for note in sorted(set(rendered.dropped)):
        print(f"zfsobs: note: {note}", file=sys.stderr)
    return 0
