"""A tracing session: the lab (optional), the bpftrace source, the capture tee, and the loop that
drives them until a duration, a command, the lab, a key or a signal ends it. Cleans up always."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import ExitStack
from typing import Callable

from zfsobs.capture import CaptureWriter
from zfsobs.errors import ZfsobsError, describe
from zfsobs.labs.userland import Lab
from zfsobs.model import Model
from zfsobs.pipeline import Pipeline
from zfsobs.preflight import check_command, check_lab_options, check_output_dir, check_output_name
from zfsobs.procs import die_with_parent, stop
from zfsobs.events import format_line
from zfsobs.sources.selfcost import SelfCost
from zfsobs.signals import Terminated, raise_on_termination, restore_defaults, whole
from zfsobs.sources.dtrace import make_source
from zfsobs.sources.bpftrace import DEFAULT_PROBES
from zfsobs.targets.target import kernel_zfs, resolve
from zfsobs.views.status import Status
from zfsobs.sources.watcher import watcher_for
from zfsobs.sources.window import Window


# No target given and no ZFS in this kernel: the default target (the system's libzpool, which no
# process may run) would wait for a txg forever, so the session says so before anything starts
NOTHING_TO_TRACE = ("nothing to trace: no ZFS kernel module (/sys/module/zfs, /proc/spl/kstat/zfs) and no --target; "
                    "try --lab (a userland ZFS lab), --target libzpool:PATH (the processes running that library), "
                    "`-- COMMAND` (what it runs) or `zfsobs doctor`")


BATCH_S = 0.05     # the shortest loop: a step takes every line that arrived meanwhile


class Session:
    def __init__(self, args, probes=DEFAULT_PROBES, samples: bool = False, counters: bool = False):
        self.args = args
        self.probes = probes
        # the model parts only some views read: the screen's 1 s samples (top), the run totals
        # (exporter); each is a third of the model's time per event (docs/performance.md, "Live path")
        self.parts = {"samples": samples, "counters": counters}
        self.stack = ExitStack()
        # what startup has made so far: cleanup and the trailer use what there is
        self.lab: Lab | None = None
        self.source = self.model = self.cost = self.pipeline = None
        self.capture: CaptureWriter | None = None
        self.command: subprocess.Popen | None = None
        self.pending: list[str] = []
        self.window: Window | None = None    # the span every probe records (zfsobs/sources/window.py)
        self.stopped_ns: int | None = None   # when run() decided to stop: the window's end
        self.reason = ""
        self.skipped = 0            # runs of the probes' programs the kernel skipped (read at the stop)
        self.error = ""      # the exception that ended the session, if one did (the trailer's `error`)

    def __enter__(self) -> "Session":
        raise_on_termination()
        try:
            self._open()
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def _open(self) -> None:
        args = self.args
        tunables = {}
        # bad input is an error before anything starts (no probe, no lab, no file)
        if getattr(args, "record", None):
            check_output_name(args.record, args.force)
            if os.geteuid() == 0:       # as root it is the check that can fail (else: "needs root" first)
                check_output_dir(args.record)
        if getattr(args, "command", None):
            check_command(args.command[0])
        if getattr(args, "lab", False):
            self.lab = Lab(duration=getattr(args, "lab_time", None), options=args.option,
                           preset=getattr(args, "workload", "default"), zfs=getattr(args, "zfs", None))
            check_lab_options(self.lab)
            target = self.lab.target
            tunables = self.lab.tunables
        else:
            if getattr(args, "option", None) or getattr(args, "lab_time", None) or \
                    getattr(args, "workload", "default") != "default" or getattr(args, "zfs", None):
                raise ZfsobsError("-o NAME=VALUE, --workload, --lab-time and --zfs are for the lab only (use --lab); "
                                  "zfsobs never writes tunables of a real system")
            if getattr(args, "target", None) in (None, "", "auto") and not getattr(args, "command", None) \
                    and not kernel_zfs() and not os.path.isdir("/proc/spl/kstat/zfs"):
                raise ZfsobsError(NOTHING_TO_TRACE)
            target = resolve(args.target)
        self.source = make_source(target, self.probes, tunables, getattr(args, "pool", None),
                                  getattr(args, "source", "auto"), getattr(args, "tracer", "auto"))
        if getattr(args, "record", None):      # after the checks of root and tracing
            check_output_dir(args.record)
        self.status = Status(self.source.meta)
        self.model = Model(**self.parts)
        # Probes first, then the workload, so the lab's first txgs are seen.
        self.stack.callback(self.source.close)
        self.source.start()
        self._wait_attached()      # a probe this tracer refuses is dropped there, with its reason
        self.status.warnings.extend(f"{name} unavailable: {why}" for name, why in self.source.unavailable.items())
        self.cost = SelfCost(self.source.pids, self.source.tracer)
        if self.lab is not None:
            self.stack.callback(self.lab.stop)
            self.lab.start()
            # the lab's ztest ends while the tracers detach, not after them
            self.source.on_stop = self.lab.terminate
            self.source.meta["lab"] = {"dir": self.lab.dir, "pid": self.lab.proc.pid,
                                       "pool": self.lab.pool, "options": self.lab.options,
                                       "workload": self.lab.preset, "ztest_args": self.lab.args,
                                       "zfs": self.lab.zfs, "zfs_version": self.lab.target.version,
                                       "ztest": self.lab.build.ztest}
        pools = tuple(getattr(args, "pool", None) or ())
        prefixes = (self.lab.pool,) if self.lab else ()
        self.source.meta["pools"] = list(pools + prefixes)
        self.watcher = watcher_for(target, self.lab.owns if self.lab else None)
        self.stack.callback(self.watcher.close)
        self.source.meta["tunables_watched"] = self.watcher.names
        if getattr(args, "record", None):
            with whole():      # a signal must not fall between the file and its closing
                self.capture = CaptureWriter(args.record, self.source.meta, force=args.force)
                self.stack.callback(self._close_capture)
            self.status.recording = args.record
        self.pipeline = Pipeline(self.source, self.model, self.status, self.capture, pools=pools,
                                 pool_prefixes=prefixes, watcher=self.watcher, window_ns=self.window.start_ns)
        if getattr(args, "command", None):
            with whole():
                try:     # SIGTERM when zfsobs dies, as its stop sends first: the command may clean up
                    self.command = subprocess.Popen(args.command, preexec_fn=die_with_parent)
                except OSError as exc:     # checked at the start; e.g. a script without #!
                    raise ZfsobsError(f"cannot run {args.command[0]}: {exc.strerror}", 126) from None
                self.stack.callback(self._stop_command)

    def _wait_attached(self) -> None:
        """Until every probe has attached; the window starts there (zfsobs/sources/window.py)."""
        while not self.source.attached:
            self.pending.extend(self.source.poll(0.2))
        self.window = Window(self.pending, self.source.meta.get("start_mono_ns"))
        self.pending = self.window.restamped(self.pending)
        self.source.meta["window"] = self.window.meta()

    def _feed_pending(self) -> None:
        """The lines read while the probes attached (their hellos): fed once, by run() or at the end."""
        with whole():
            lines, self.pending = self.pending, []
            for line in lines:
                self.pipeline.feed_line(line)

    def run(self, on_tick: Callable[[], bool] | None = None, tick: float = 0.5) -> None:
        """Drive the pipeline; `on_tick` (the view) returns False to stop."""
        # the duration is the window's: it counts from the moment every probe records
        deadline = self.window.deadline(self.args.duration) if getattr(self.args, "duration", None) else None
        ticked = 0.0
        try:
            self._feed_pending()
            while True:
                began = time.monotonic()
                self.pipeline.step(tick)
                self.status.cost = self.cost.line()
                if self.source.ended:
                    self.reason = self.source.ended
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    self.reason = "duration reached"
                    break
                if self.lab is not None and (not self.lab.alive() or self.lab.overdue()):
                    self.reason = self.lab.failure() or "the lab's ztest run ended"
                    break
                if self.command is not None and self.command.poll() is not None:
                    self.reason = f"command exited with status {self.command.returncode}"
                    break
                # a step returns as soon as lines arrive (hundreds a second): the view's tick
                # (a redraw) stays at its own rate
                if on_tick is not None and time.monotonic() - ticked >= tick:
                    ticked = time.monotonic()
                    if on_tick() is False:
                        self.reason = "quit"
                        break
                # lines come in bursts all second long: taking them in batches of 50 ms costs a
                # tenth of the wakeups, and nothing is shown sooner than the next redraw anyway
                time.sleep(max(0.0, BATCH_S - (time.monotonic() - began)))
        except KeyboardInterrupt:
            self.reason = "interrupted (SIGINT)"
        except Terminated as exc:
            self.reason = f"terminated ({exc})"
        self.stopped_ns = time.monotonic_ns()
        self._drain()
        self.status.message = self.reason

    @property
    def recorded_s(self) -> float:
        """How long the window ran: from its start (every probe recording) to the stop."""
        if self.window is None or self.stopped_ns is None:
            return 0.0
        start = self.window.start_ns if self.window.start_ns is not None else self.window.attached_at
        return max(0.0, (self.stopped_ns - start) / 1e9)

    def _drain(self) -> None:
        """The probes' last lines into the model and capture before anything closes: a process's
        final counts are printed as it exits, often after the session decided to stop. A second
        SIGINT/SIGTERM during the drain cuts it short; what was read is kept either way."""
        try:
            # a last reading while the tracers still run (they exit in finish); the runs the kernel
            # skipped are counts the probes never made: said as lost events
            for name, count in self.cost.skipped().items():
                if count > 0:
                    self.skipped += count
                    self.pipeline.feed_line(format_line("lost", time.monotonic_ns(),
                                                        {"count": count, "probe": name, "cause": "skipped"}))
            for line in self.source.finish():
                self.pipeline.feed_line(line)
        except (KeyboardInterrupt, Terminated):
            pass

    def _close_capture(self) -> None:
        trailer = {"end_wall_ns": time.time_ns(), "end_mono_ns": time.monotonic_ns(),
                   "reason": self.reason or "error", "events": self.pipeline.kept if self.pipeline else 0,
                   "malformed": self.pipeline.parser.malformed if self.pipeline else 0,
                   "lost": self.model.lost, "dropped_at_stop": self.source.dropped_at_stop,
                   "before_window": self.pipeline.before_window if self.pipeline else 0,
                   "cost": self.cost.totals()}
        if self.error:
            trailer["error"] = self.error
        try:
            self.capture.close(trailer)
        except ZfsobsError:
            self.capture.abandon()
            raise

    def _stop_command(self) -> None:
        stop(self.command, 10)

    def __exit__(self, exc_type, exc, tb) -> None:
        self._ended_by(exc)
        try:
            # Ignore further SIGINT/SIGTERM while cleaning up: cleanup must finish.
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_IGN)
            if self.pending and self.pipeline is not None:    # ended before run(): keep them too
                try:
                    self._feed_pending()
                except Exception:       # the session is ending with an error of its own
                    pass
            self.stack.close()
        finally:
            restore_defaults()

    def _ended_by(self, exc: BaseException | None) -> None:
        """The trailer's reason when an exception leaves the session: a signal during startup,
        or an error (a ZfsobsError's message or a bug's type and message: its `error` field)."""
        if isinstance(exc, KeyboardInterrupt):
            self.reason = self.reason or "interrupted (SIGINT)"
        elif isinstance(exc, Terminated):
            self.reason = self.reason or f"terminated ({exc})"
        elif isinstance(exc, Exception):
            self.reason = "error"
            self.error = " ".join(str(exc).split()) if isinstance(exc, ZfsobsError) else describe(exc)

