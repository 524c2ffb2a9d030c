"""The command line's grammar: subcommands, their flags, and the checks argparse cannot make.

One meaning per flag in every subcommand, as in zfs(8) and zpool(8): `-o NAME=VALUE` is a ZFS
tunable (the lab's; never a real system's), `-O FILE` the capture written. `record -o FILE`, the
old spelling of `-O FILE`, still works (a path without `=`) and says so when the recording starts."""
from __future__ import annotations

import argparse
import math

from zfsobs import __version__
from zfsobs.errors import ZfsobsError
from zfsobs.targets.names import pool_name

DEFAULT_LISTEN = "127.0.0.1:9976"     # exporter: loopback (docs/prometheus.md: the port)

OUTPUT_FLAGS = ("-O", "--output", "--out")
LEGACY_OUTPUT = "record -o FILE is the old spelling of -O FILE (-o is NAME=VALUE, a lab tunable)"
# a session's --duration: the recording window's (docs/capture.md, "The recording window")
DURATION_HELP = "stop after S seconds of recording, counted once every probe has attached"


def probe_list(text: str) -> tuple[str, ...]:
    """record --probes: names from the default set, in its order, with txg (the backbone) always."""
    from zfsobs.sources.bpftrace import DEFAULT_PROBES, REQUIRED_PROBES
    names = {n.strip() for n in text.split(",") if n.strip()}
    unknown = sorted(names - set(DEFAULT_PROBES))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"not a probe: {', '.join(unknown) or repr(text)} "
                                         f"(probes: {', '.join(DEFAULT_PROBES)})")
    return tuple(n for n in DEFAULT_PROBES if n in names or n in REQUIRED_PROBES)


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number: {text!r}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def _tunable_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("-o", "--option", action="append", default=[], metavar="NAME=VALUE",
                   help=f"{what} (repeatable)")


def _record_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("-O", "--record", "--output", dest="record", metavar="FILE",
                   help="also record the stream to FILE")
    p.add_argument("--force", action="store_true", help="overwrite an existing FILE")


def _target_args(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--lab", action="store_true",
                       help="start the bundled userland ZFS lab (ztest) and trace it")
    where.add_argument("--target", metavar="T",
                       help="kernel | libzpool | libzpool:PATH | PATH (default: kernel if loaded)")
    _tunable_arg(p, "with --lab: a ZFS tunable for the lab's ztest")
    p.add_argument("--workload", default="default", metavar="W",
                   help="with --lab: default; zil (one dataset, 16 KiB log blocks: a busier ZIL); "
                        "demo (./scripts/demo: an 8 MiB dirty limit and a vdev cache: every panel moves)")
    _zfs_arg(p, "with --lab: ")
    p.add_argument("--lab-time", type=positive, metavar="S",
                   help="with --lab: ztest runs S seconds and ends by itself, which ends the session "
                        "(a clean end: every commit and txg in flight completes)")
    p.add_argument("--source", choices=("auto", "trace", "kstat"), default="auto",
                   help="trace (bpftrace as root), kstat (ZFS's own counters, no root; fewer fields: "
                        "docs/kstat.md), or auto: trace if it can run here, else kstat (the header says which)")
    p.add_argument("-p", "--pool", action="append", default=[], metavar="POOL",
                   help="only this pool (repeatable; default: all pools)")
    p.add_argument("--tracer", choices=("auto", "bpftrace", "dtrace"), default="auto",
                   help="auto: bpftrace on Linux, dtrace on illumos and FreeBSD; dtrace on Linux: "
                        "Oracle's DTrace 2.x on the kernel's zfs module (docs/illumos.md)")
    _bpftrace_arg(p)


def _bpftrace_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bpftrace", metavar="PATH", help="the bpftrace to run (default: $ZFSOBS_BPFTRACE, else "
                   "bpftrace on PATH; docs/bpftrace-versions.md)")


def _zfs_arg(p: argparse.ArgumentParser, scope: str = "") -> None:
    # validated by the lab (one-line error listing the builds), not by argparse's choices
    p.add_argument("--zfs", metavar="V", help=f"{scope}the OpenZFS to run: 2.1 (installed; the default) "
                   "or 2.3 (scripts/setup's private copy, docs/lab.md)")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="zfsobs", description="Live ZFS internals: txg sync, ZIL, "
                                 "vdev queue, vdev_cache. In every command -o NAME=VALUE is a (lab) "
                                 "tunable and -O FILE the capture written.")
    ap.add_argument("--version", action="version", version=f"zfsobs {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    p = sub.add_parser("top", help="live view (line mode when stdout is not a terminal)")
    _target_args(p)
    p.add_argument("--interval", type=positive, default=1.0, metavar="S", help="refresh every S seconds (default 1)")
    _record_arg(p)
    p.add_argument("--duration", type=positive, metavar="S", help=DURATION_HELP)
    p.add_argument("-s", "--separator", metavar="SEP", help="line mode: separate columns with SEP")

    p = sub.add_parser("record", help="record the event stream to a capture file (-O FILE)")
    _target_args(p)
    p.add_argument(*OUTPUT_FLAGS, dest="record", required=True, metavar="FILE", help="the capture to write")
    p.add_argument("--force", action="store_true", help="overwrite an existing FILE")
    p.add_argument("--duration", type=positive, metavar="S", help=DURATION_HELP)
    p.add_argument("--probes", type=probe_list, metavar="LIST",
                   help="only these probes, comma-separated (txg, the backbone, is always traced; "
                        "default: every default probe)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ...: record until CMD exits")

    p = sub.add_parser("zilstat", help="ZIL traffic in zilstat's columns, per interval or per txg")
    _target_args(p)
    p.add_argument("-t", dest="timestamps", action="store_true", help="print a time column")
    p.add_argument("-M", dest="megabytes", action="store_true", help="MB (10^6 bytes) instead of bytes")
    p.add_argument("-l", dest="linecount", type=int, default=0, metavar="N", help="repeat the header every N lines")
    _record_arg(p)
    p.add_argument("interval", nargs="?", default="1", help="seconds, or 'txg' for one line per txg (default 1)")
    p.add_argument("count", nargs="?", type=int, help="stop after COUNT lines")

    p = sub.add_parser("vqstat", help="vdev queue depth in zpool iostat -q's columns, time-weighted per interval")
    _target_args(p)
    p.add_argument("-v", dest="verbose", action="store_true", help="a line per leaf vdev too")
    p.add_argument("--max", dest="peak", action="store_true", help="the highest depth in each interval, not the mean")
    p.add_argument("-t", dest="timestamps", action="store_true", help="print a time column")
    _record_arg(p)
    p.add_argument("interval", nargs="?", type=positive, default=1.0, help="seconds (default 1)")
    p.add_argument("count", nargs="?", type=int, help="stop after COUNT intervals")

    p = sub.add_parser("exporter", help="serve the live figures on /metrics for Prometheus (docs/prometheus.md)")
    _target_args(p)
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"where /metrics is served (default {DEFAULT_LISTEN}, loopback; write the host: "
                        "0.0.0.0:PORT, [::]:PORT)")
    p.add_argument("--web-config-file", metavar="FILE",
                   help="TLS and basic auth, in the Prometheus exporter-toolkit's format (docs/prometheus.md)")
    _record_arg(p)
    p.add_argument("--duration", type=positive, metavar="S", help=DURATION_HELP)

    p = sub.add_parser("replay", help="replay a capture through the live view")
    p.add_argument("file", help="a capture (zfsobs record -O FILE)")
    p.add_argument("--speed", type=positive, default=1.0, metavar="X",
                   help="X times real time (default 1; + and - change it while replaying)")
    p.add_argument("--at", metavar="WHEN", help="start there: +1h30m from the start, HH:MM[:SS] or "
                   "YYYY-MM-DD HH:MM[:SS] local time (also the g key)")

    p = sub.add_parser("report", help="summarise a capture")
    p.add_argument("file", help="a capture (zfsobs record -O FILE)")
    p.add_argument("--format", choices=("text", "json", "csv", "openmetrics"), default="text",
                   help="openmetrics: timestamped, for promtool tsdb create-blocks-from openmetrics")
    p.add_argument("--section", default="txgs", metavar="S",
                   help="csv: which table: txgs (the default), zil, vdev_queue or vdev_cache")
    p.add_argument("--step", type=positive, default=15.0, metavar="S",
                   help="openmetrics: one point per series every S seconds of the capture (default 15)")
    p.add_argument("--instance", help="openmetrics: the instance label (default: the capture's host)")
    p.add_argument("--compare", action="store_true", help="split the capture at tunable changes: per metric "
                   "before/after mean, p99 and their ratio (docs/tuning.md)")

    p = sub.add_parser("lab", help="run the userland ZFS lab (ztest) in the foreground, "
                       "or with --kernel a command in a guest with the zfs module")
    p.add_argument("--duration", type=positive, metavar="S", help="stop after S seconds")
    p.add_argument("--workload", metavar="W", help="default, zil (a busier ZIL) or demo (every panel moves); with --kernel: mix "
                   "(70/30 8k, the default), sync-write, random-read or none")
    _zfs_arg(p)
    _tunable_arg(p, "a ZFS tunable: for ztest, or with --kernel a zfs module parameter set at load")
    p.add_argument("--kernel", action="store_true", help="the kernel lab: run -- CMD ... in a QEMU guest "
                   "with OpenZFS's kernel module and pool zfsobs_klab (docs/kernel-lab.md)")
    p.add_argument("--layout", help="with --kernel: mirror-log (default), mirror or single")
    p.add_argument("--disk-size", metavar="SIZE", help="with --kernel: each data disk (default 2G, sparse)")
    p.add_argument("--timeout", type=positive, metavar="S", help="with --kernel: wall-clock limit "
                   "(default 3600 s)")
    p.add_argument("--console", action="store_true", help="with --kernel: copy the guest console to stderr")
    p.add_argument("--btf", action="store_true", help="with --kernel: the image whose zfs.ko has module BTF "
                   "(default: a stock DKMS build without it, as users have; docs/kernel-lab.md)")
    p.add_argument("--distro", metavar="D", help="with --kernel: the image's Debian release: bookworm "
                   "(OpenZFS 2.1, the default), trixie (2.3), trixie-backports (2.4) or sid (2.4, with dtrace)")
    p.add_argument("--possible-cpus", type=int, metavar="N", help="with --kernel: the guest kernel reports "
                   "N possible CPUs on its 2 vCPUs (docs/kernel-lab.md)")
    p.add_argument("--list", action="store_true", help="with --kernel: the images, which are built, "
                   "and what each holds")
    p.add_argument("--share", action="append", default=[], metavar="DIR",
                   help="with --kernel: a host directory the guest can write, at the same path (repeatable)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="with --kernel: -- CMD ... to run in the guest; "
                   "without: `set NAME=VALUE [--pid PID]` changes a tunable in the running lab (docs/tuning.md)")

    p = sub.add_parser("probes", help="list probe scripts, or show one rendered for a target")
    p.add_argument("action", choices=("list", "show"), help="list the probes, or show one rendered")
    p.add_argument("name", nargs="?", help="show: the probe (txg, zil, vdev_queue, vdev_cache, throttle)")
    p.add_argument("--target", metavar="T", default="libzpool",
                   help="show: the target to render for: kernel | libzpool (the default) | libzpool:PATH | PATH")

    p = sub.add_parser("doctor", help="check what can be traced here")
    _bpftrace_arg(p)
    p.add_argument("--quick", action="store_true", help="skip loading each probe with bpftrace "
                   "(seconds per probe): the checks that need no load")
    return ap


def parse(argv: list[str]) -> argparse.Namespace:
    """argv parsed, with `record`'s old `-o FILE` turned into -O FILE (args.legacy_output says so)
    and `record -- CMD`'s command checked for presence (whether it runs: session.py)."""
    legacy = False
    if argv[:1] == ["record"]:
        argv, legacy = _legacy_output(argv)
    args = parser().parse_args(argv)
    args.legacy_output = legacy
    if getattr(args, "pool", None):       # a pool name reaches dtrace's arguments and zpool's
        args.pool = [pool_name(p) for p in args.pool]
    if args.cmd == "record":
        args.command = after_dashes(args.command, "record")
    return args


def _legacy_output(argv: list[str]) -> tuple[list[str], bool]:
    """`record -o FILE` (a value without `=`, no -O given) is -O FILE; any other -o is a tunable."""
    head, tail = _split_command(argv)
    old = [i for i, a in enumerate(head[:-1]) if a == "-o" and "=" not in head[i + 1]]
    if not old:
        return argv, False
    if len(old) > 1 or set(OUTPUT_FLAGS) & set(head):
        raise ZfsobsError(f"record: -o {head[old[-1] + 1]}: -o takes NAME=VALUE (a lab tunable); "
                          "the output file is -O FILE")
    head = list(head)
    head[old[0]] = "--output"
    return head + tail, True


def _split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i:]
    return argv, []


def after_dashes(words: list[str], cmd: str) -> list[str]:
    """The command of `CMD ... -- COMMAND ARGS` (argparse's REMAINDER keeps the `--`): only the
    first `--` goes, a later one is the command's own; `--` with nothing after it is an error."""
    if words[:1] == ["--"]:
        if len(words) == 1:
            raise ZfsobsError(f"{cmd}: nothing after --: give the command to run (-- CMD ARGS...)")
        return words[1:]
    return words
