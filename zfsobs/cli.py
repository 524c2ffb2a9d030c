"""Command line: dispatch to the commands (their grammar: zfsobs/cli_parser.py; the lab commands:
zfsobs/cli_lab.py). Every failure is one line on stderr, no traceback: a ZfsobsError its own
message and status; anything unexpected an "internal error" line and status 70 (EX_SOFTWARE), the
traceback only with ZFSOBS_DEBUG=1. Everything written to stderr passes zfsobs/safe.py's rule
(the messages quote paths, pool names and the tracer's own words)."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback

from zfsobs import cli_lab, safe
from zfsobs.cli_parser import LEGACY_OUTPUT, parse, positive
from zfsobs.errors import INTERNAL_ERROR_STATUS, ZfsobsError, describe
from zfsobs.signals import Terminated


def main(argv: list[str] | None = None) -> int:
    stderr, sys.stderr = sys.stderr, safe.Stream(sys.stderr)
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    finally:
        sys.stderr = stderr


def _main(argv: list[str]) -> int:
    try:
        return _dispatch(parse(argv))
    except ZfsobsError as exc:
        print(f"zfsobs: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:       # outside a session's loop, which ends on it by itself
        print("zfsobs: interrupted (SIGINT)", file=sys.stderr)
        return 128 + signal.SIGINT
    except Terminated as exc:
        print(f"zfsobs: terminated ({exc})", file=sys.stderr)
        return 128 + signal.Signals.__members__.get(str(exc), signal.SIGTERM)
    except BrokenPipeError:
        # stdout closed (e.g. piped into head): not an error of ours.
        _flush_stdout()
        return 0
    except Exception as exc:        # a bug: a session's cleanup has run, its capture has its trailer
        if os.environ.get("ZFSOBS_DEBUG") == "1":
            traceback.print_exc()
        print(f"zfsobs: internal error: {describe(exc)}; ZFSOBS_DEBUG=1 shows the traceback", file=sys.stderr)
        _flush_stdout()
        return INTERNAL_ERROR_STATUS


def _flush_stdout() -> None:
    """What stdout holds, written now; if it cannot be, dropped, so that the interpreter's last
    flush does not fail with a second message (a closed pipe, a full disk)."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass


def _dispatch(args) -> int:
    cmd = args.cmd
    if getattr(args, "bpftrace", None):     # one place says which bpftrace runs: bpftrace_path
        os.environ["ZFSOBS_BPFTRACE"] = args.bpftrace
        os.environ["ZFSOBS_BPFTRACE_GIVEN"] = "--bpftrace"      # what messages name it by
    if cmd == "record":
        # with both a command and --duration, whichever ends first stops the recording
        return _record(args)
    if cmd == "top":
        return _top(args)
    if cmd == "zilstat":
        return _zilstat(args)
    if cmd == "vqstat":
        return _vqstat(args)
    if cmd == "exporter":
        return _exporter(args)
    if cmd in ("replay", "report"):
        from zfsobs.capture import read_capture
        if cmd == "report" and args.compare and args.format == "openmetrics":
            raise ZfsobsError("report --compare: --format text, json or csv (OpenMetrics is a time "
                              "series: report --format openmetrics, without --compare)")
        capture = read_capture(args.file)
        # a text report and the replay's live header show them; everything else, on stderr
        shown = args.format == "text" if cmd == "report" else sys.stdout.isatty()
        if not shown:
            for warning in capture.warnings:
                print(f"zfsobs: warning: {args.file}: {warning}", file=sys.stderr)
        if cmd == "report":
            from zfsobs.views import report
            if args.compare:
                from zfsobs.views import compare
                sys.stdout.write(compare.render(capture, args.format))
                return 0
            if args.format == "openmetrics":
                from zfsobs.views.openmetrics import export
                export(capture, sys.stdout.buffer, args.step, args.instance)
                return 0
            if args.format == "csv" and args.section not in report.SECTIONS:
                raise ZfsobsError(f"no section {args.section!r} (have: {', '.join(report.SECTIONS)})")
            report.write(capture, args.format, sys.stdout, args.section)
            return 0
        return _replay(capture, args)
    if cmd == "lab":
        return cli_lab.run(args)
    if cmd == "probes":
        return _probes(args)
    if cmd == "doctor":
        from zfsobs.doctor import report
        return report.run(sys.stdout, load=not args.quick)
    raise ZfsobsError(f"unknown command {cmd}")


def _top(args) -> int:
    from rich.console import Console
    from zfsobs.session import Session
    from zfsobs.views.lines import TxgLines
    # ZFSOBS_TTY: the kernel lab's guest writes to the host's terminal through a serial port
    forced = os.environ.get("ZFSOBS_TTY") == "1"
    tty = sys.stdout.isatty() or forced
    with Session(args, samples=True) as session:
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
    if args.linecount < 0:
        raise ZfsobsError(f"-l must be >= 0 (0: the header once): {args.linecount}")
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
        return positive(text)
    except argparse.ArgumentTypeError as exc:
        raise ZfsobsError(f"interval: {exc} (seconds, or 'txg')") from None


def _record(args) -> int:
    from zfsobs.session import Session
    from zfsobs.sources.bpftrace import DEFAULT_PROBES
    started = time.monotonic()
    with Session(args, probes=args.probes or DEFAULT_PROBES) as session:
        kstat = session.source.meta.get("kstat")
        if kstat:
            print(f"zfsobs: kstat mode ({kstat['why']}): ZFS's own counters, fewer fields (docs/kstat.md)",
                  file=sys.stderr)
        for name, why in session.source.unavailable.items():     # e.g. too many CPUs for a probe
            print(f"zfsobs: {name} not traced: {why}", file=sys.stderr)
        if args.legacy_output:
            print(f"zfsobs: note: {LEGACY_OUTPUT}", file=sys.stderr)
        print(f"zfsobs: recording {session.source.target.name} to {args.record}"
              + (f" for {args.duration:g} s" if args.duration else "")
              + (" (Ctrl-C stops)" if sys.stdin.isatty() else ""), file=sys.stderr)
        session.run(tick=0.5)
    parser = session.pipeline.parser
    txgs = sum(p.total for p in session.model.txg.pools.values())
    # the window's length, apart from the probes' start and stop (docs/capture.md, "The recording window")
    early = session.pipeline.before_window
    print(f"zfsobs: recorded {session.pipeline.kept} events ({txgs} txgs, {parser.malformed} malformed, "
          f"{session.model.lost} lost) in {session.recorded_s:.1f} s ({time.monotonic() - started:.1f} s with "
          f"the probes' start and stop) to {args.record} ({session.capture.bytes} bytes); stopped: {session.reason}"
          + (f"; {early} lines from before every probe had attached left out" if early else ""), file=sys.stderr)
    if session.source.tracer == "dtrace" and session.skipped:
        # the preemptions that skipped runs also make DTrace 2.0 block firings it counts nowhere
        print("zfsobs: note: dtrace's programs were preempted while running; DTrace 2.0 then also drops "
              "firings it does not count, so D's counts may be a little low (docs/illumos.md, "
              "\"Firings DTrace blocks, uncounted\")", file=sys.stderr)
    cost = session.cost.totals()
    tracers = sum(v["cpu_s"] for v in cost.values() if isinstance(v, dict))
    print(f"zfsobs: cost: zfsobs {cost['zfsobs_cpu_s']:.1f} CPU-s, {session.source.tracer} {tracers:.1f} CPU-s "
          f"in {cost['seconds']:.0f} s (the probes' own run time: see docs/performance.md)", file=sys.stderr)
    return 1 if _probe_died(session) else 0


def _exporter(args) -> int:
    from zfsobs.session import Session
    from zfsobs.views import exporter
    sock, web = exporter.prepare(args)        # a bad address or web config before anything starts
    args.force = False
    with Session(args, counters=True) as session:
        kstat = session.source.meta.get("kstat")
        if kstat:
            print(f"zfsobs: kstat mode ({kstat['why']}): ZFS's own counters, fewer metrics (docs/prometheus.md)",
                  file=sys.stderr)
        server = exporter.serve(session, sock, web, args.listen)
    if _probe_died(session):
        server.shutdown()
        return 1
    if session.lab is not None and session.reason.startswith("the lab's ztest run ended"):
        exporter.linger(server, session.reason)
    else:
        server.shutdown()
        if not session.reason.startswith(("interrupted", "terminated")):     # e.g. the lab's ztest failed
            print(f"zfsobs: stopped: {session.reason}", file=sys.stderr)
    return 0


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
        run_replay(capture, Console(), args.speed, args.at)
        return 0
    from zfsobs.events import Parser
    from zfsobs.views import goto
    from zfsobs.views.lines import TxgLines
    lines, at = TxgLines(capture.meta), None
    for ev in capture.events(Parser(), digests=False):     # streamed: a day's capture is GBs of lines
        if at is None:
            at = goto.parse(args.at, capture.meta, ev.ts, capture.last_ts() or ev.ts) if args.at else ev.ts
        if ev.ts >= at:
            lines(ev)
    return 0


def _probes(args) -> int:
    from zfsobs.targets import render
    from zfsobs.targets.platforms import uses_dtrace
    where = "illumos" if uses_dtrace() else "linux"     # illumos and FreeBSD run the D scripts
    if args.action == "list":
        if args.name:
            raise ZfsobsError(f"probes list takes no name ({args.name!r}); probes show NAME prints one")
        for name in render.available(where):
            print(name)
        return 0
    if not args.name:
        raise ZfsobsError("probes show NAME: which probe? (" + ", ".join(render.available(where)) + ")")
    if where == "illumos":
        from zfsobs.sources.dtrace import d_script
        sys.stdout.write(d_script(args.name))
        return 0
    from zfsobs.sources.bpftrace_binary import bpftrace_path, bpftrace_version
    from zfsobs.targets.target import resolve
    tracer = bpftrace_path()     # the script as this machine's bpftrace would run it
    rendered = render.render(args.name, resolve(args.target), bpftrace_version(tracer) if tracer else "")
    sys.stdout.write(rendered.text)
    for note in sorted(set(rendered.dropped)):
        print(f"zfsobs: note: {note}", file=sys.stderr)
    return 0
