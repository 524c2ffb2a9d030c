"""Sources of event lines. The live source runs one bpftrace per probe script and merges their
stdout; a capture is the other source (capture.read_capture). Children die with us, always."""
from __future__ import annotations

import os
import platform
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque

from zfsobs import __version__
from zfsobs.errors import ZfsobsError
from zfsobs.events import format_line
from zfsobs.targets.render import Rendered, render
from zfsobs.procs import remove_stale
from zfsobs.signals import stop_pending, whole
from zfsobs.sources.stop_marker import StopMarker
from zfsobs.sources.stopping import Stopping
from zfsobs.targets.target import Target
from zfsobs.sources.d_slots import DSlots, DumpTotals, dump_totals, wanted as slot_totals
from zfsobs.sources.bpftrace_child import NOISE, bpftrace_env, child_setup
from zfsobs.sources.set_dumps import SetDumps
from zfsobs.sources.vq_dumps import VqDumps
from zfsobs.sources.window import restamp, ts_of
from zfsobs.sources.bpftrace_binary import bpftrace_version, check_tracing, run_flags

_LOST_RE = re.compile(r"^Lost (\d+) events")     # stdout up to bpftrace 0.23, stderr from 0.24
DEFAULT_PROBES = ("txg", "zil", "vdev_queue", "vdev_cache", "throttle")
# A probe that prints its counts as timed dumps of bpftrace maps (zfsobs/sources/vq_dumps.py), and how long
# the stop waits at most for dumps that cover it: a set is printed 450 ms after the probes leave it,
# on the next 500 ms tick (~1 to 1.5 s), longer when bpftrace lags.
_DUMPS, DUMP_DRAIN_S = "zfsobs 1 vq_dump ", 5.0
# A probe that counts in map sets (zfsobs/sources/set_dumps.py): its dumps are waited for the same way
_SET_DUMPS = "zfsobs 1 set_dump "
# How long the stop waits, from the moment it is asked, for every tracer to detach its probes, run
# END and exit (its pipes then end); past it one is killed. Measured on 2 cores: 1-5 s quiet, 13-18 s
# at load 8-10 (bpftrace's uprobe detach; docs/performance.md, "Start and stop"); dtrace prints its
# aggregations at END, 25 s for zil.d's under software emulation (issue 27). Lines come to the end
# of it: a shorter wait in finish() only lost the last ones (bye, END's counts) while close() waited on.
STOP_WAIT_S = 30.0
REQUIRED_PROBES = ("txg",)     # the backbone; the others are left out where the target cannot give them
START_TIMEOUT = float(os.environ.get("ZFSOBS_ATTACH_TIMEOUT") or 60)  # the kernel lab raises it for TCG
POLL_S = 0.02       # how often poll() looks for lines while none have come
PREFIX = "zfsobs-probes-"   # the rendered scripts' temp directory, removed once bpftrace has read them


class BpftraceSource(Stopping):
    tracer = "bpftrace"     # in messages; DtraceSource says dtrace
    marked_stop = True      # scripts carry a stop probe (zfsobs/sources/stop_marker.py); dtrace gets SIGINT
    lost_re = _LOST_RE      # what the tracer says when the kernel dropped what a probe recorded
    def __init__(self, target: Target, probes=DEFAULT_PROBES, tunables: dict | None = None):
        self.target = target
        self.bpftrace = check_tracing()
        version = bpftrace_version(self.bpftrace)
        self.rendered: list[Rendered] = []
        self.unavailable: dict[str, str] = {}
        for name in probes:
            try:
                self.rendered.append(render(name, target, version))
            except ZfsobsError as exc:
                if name in REQUIRED_PROBES:
                    raise
                self.unavailable[name] = str(exc)
        self.meta = {
            "zfsobs": __version__, "host": platform.node(), "kernel": platform.release(),
            "source": "bpftrace", "bpftrace": version,
            "target": target.describe(),
            "probes": {r.name: {"sha256": r.sha256, "functions": r.functions, "dropped": r.dropped}
                       for r in self.rendered},
            "unavailable": dict(self.unavailable),
            "tunables": dict(tunables or {}),
            "start_wall_ns": time.time_ns(), "start_mono_ns": time.monotonic_ns(),
        }
        self._runtime()

    def _runtime(self) -> None:
        """The state of a run, before any tracer starts (DtraceSource shares it)."""
        # a deque, not a queue.Queue: a stop signal raises in the main thread, and one raised while
        # it held a Queue's lock left that lock held for good (a record hung in finish() in CI);
        # deque's append and popleft take no lock
        self._queue: deque = deque()
        self._procs: list[tuple[str, subprocess.Popen]] = []
        self._stderr: dict[str, list[str]] = {}
        self._attached: set[str] = set()
        self._stop_ns: int | None = None     # when finish() asked the probes to stop
        self._stop_by: float | None = None   # until when the tracers may take to exit (STOP_WAIT_S)
        self._late: dict[str, list[str]] = {}
        self.dropped_at_stop = 0
        self._pumps: list[threading.Thread] = []
        self._dumps: dict[str, VqDumps] = {}      # per probe that prints dumps (zfsobs/sources/vq_dumps.py)
        self._dir = ""
        self.ended = ""           # why the source stopped, once it has
        self._marker: StopMarker | None = None    # how bpftrace is told to stop (dtrace: SIGINT)

    def start(self) -> "BpftraceSource":
        remove_stale(tempfile.gettempdir(), PREFIX)
        self._dir = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")
        self._marker = StopMarker() if self.marked_stop else None
        for r in self.rendered:
            path = os.path.join(self._dir, r.name + ".bt")
            with open(path, "w") as f:
                f.write(r.text + (self._marker.probe(r.text) if self._marker else ""))
            with whole():     # a Ctrl-C inside Popen would leave a child that close() never sees
                # errors: a byte that is not UTF-8 (a path, a pool name) becomes U+FFFD, not an
                # exception that would end that probe's reader thread for good
                proc = subprocess.Popen(self.command(path), stdout=subprocess.PIPE, env=bpftrace_env(r.map_keys),
                                        stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                        errors="replace", bufsize=1, preexec_fn=child_setup,
                                        start_new_session=True)
                self._procs.append((r.name, proc))
            self._stderr[r.name] = []
            for stream, is_err in ((proc.stdout, False), (proc.stderr, True)):
                pump = threading.Thread(target=self._pump, args=(r.name, stream, is_err), daemon=True)
                pump.start()
                self._pumps.append(pump)
        self._started = time.monotonic()
        return self

    def command(self, path: str) -> list[str]:
        """How one probe script runs (DtraceSource runs dtrace instead)."""
        return [self.bpftrace, *run_flags(self.meta["bpftrace"], self.target.kind == "kernel"), path]

    def _pump(self, name: str, stream, is_err: bool) -> None:
        dumps, text = None, "" if is_err else self._text(name)
        totals = DumpTotals() if dump_totals(text) else None     # D's dumps of totals
        if _DUMPS in text:
            dumps = self._dumps[name] = VqDumps()
        elif _SET_DUMPS in text:
            dumps = self._dumps[name] = SetDumps(name, self._map_keys(name))
        elif slot_totals(text):
            dumps = DSlots()
        for raw in stream:
            raw = raw.rstrip("\n")
            if is_err:
                if self.lost_re.match(raw):     # bpftrace 0.24+; dtrace's drops
                    self._take_line(name, raw)
                elif raw.strip() and not any(noise in raw for noise in NOISE):
                    self._stderr[name].append(raw)
                continue
            for got in (totals.feed(raw) if totals else (raw,)):
                for line in (dumps.feed(got) if dumps else (got,)):
                    self._take_line(name, line)

    def _text(self, name: str) -> str:
        return next((r.text for r in self.rendered if r.name == name), "")

    def _map_keys(self, name: str) -> int:
        return next(r.map_keys for r in self.rendered if r.name == name)

    def _take_line(self, name: str, line: str) -> None:
        lost = self.lost_re.match(line)
        if lost:      # the window ends at the stop: a count read after it is stamped with the stop
            now = time.monotonic_ns() if self._stop_ns is None else min(time.monotonic_ns(), self._stop_ns)
            line = format_line("lost", now, {"count": lost.group(1) or 1, "probe": name})
        elif self._stop_ns is not None:
            self._late.setdefault(name, []).append(line)
            return
        self._queue.append(line)

    def poll(self, timeout: float) -> list[str]:
        """Lines that arrived within `timeout` seconds; raises if a probe failed to start."""
        deadline = time.monotonic() + timeout
        lines = self._take()
        while not lines and time.monotonic() < deadline and not stop_pending():
            time.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
            lines = self._take()
        for line in lines:
            if " hello " in line:
                self._attached.update(n for n in self.meta["probes"] if f"probe={n} " in line + " ")
        if self.attached:
            self._remove_dir()      # bpftrace has compiled them: nothing for a SIGKILL to leave
        self._check_children()
        return lines

    def _check_children(self) -> None:
        for name, proc in self._procs:
            code = proc.poll()
            if code is None:
                continue
            err = self._error_text(name)
            if name not in self._attached:
                why = f"{self.tracer} could not start probe {name!r} on {self.target.name}: {err or f'exit status {code}'}"
                if name in REQUIRED_PROBES:
                    raise ZfsobsError(why)
                self._drop(name, why)     # e.g. this bpftrace's verifier or parser refuses it: the others run
                continue
            if not self.ended:
                self.ended = f"{self.tracer} ({name}) exited with status {code}" + (f": {err}" if err else "")
        if not self.ended and time.monotonic() - self._started > START_TIMEOUT:
            late = [n for n, _ in self._procs if n not in self._attached]
            if late:
                raise ZfsobsError(f"{self.tracer} did not attach probe(s) {', '.join(late)} within "
                                  f"{START_TIMEOUT:.0f} s")

    def _drop(self, name: str, why: str) -> None:
        """A probe that never attached leaves the run as an unavailable metric (the capture's header,
        written once all have attached, says why), as one the target lacks does."""
        self._procs = [(n, proc) for n, proc in self._procs if n != name]
        self.rendered = [r for r in self.rendered if r.name != name]
        self.meta["probes"].pop(name, None)
        self.unavailable[name] = self.meta["unavailable"][name] = why

    def _error_text(self, name: str) -> str:
        time.sleep(0.05)     # let the stderr pump catch the last words
        lines = self._stderr.get(name, [])
        for line in lines:
            if line.startswith("ERROR") or "rror" in line:
                return line.strip()[:300]
        return lines[0].strip()[:300] if lines else ""

    @property
    def pids(self) -> dict[str, int]:
        """Probe name -> its tracer's process id (zfsobs/sources/selfcost.py measures them)."""
        return {name: proc.pid for name, proc in self._procs}

    @property
    def attached(self) -> bool:
        return len(self._attached) == len(self._procs)

    def finish(self) -> list[str]:
        """Stop the probes and return every line they still had: what the kernel's buffers held and
        bpftrace had not printed yet (e.g. the final counts of a process that just exited). The stop
        makes bpftrace print what is buffered, run END and exit; its pipes then reach EOF. The stop
        hook (zfsobs/sources/stopping.py: the lab's stop) runs while they detach."""
        if self._dumps:
            # END prints no dump (it runs as probes detach): wait for the dumps of sets left after now
            # (bpftrace's clock is the monotonic one)
            now, deadline = time.monotonic_ns(), time.monotonic() + DUMP_DRAIN_S
            while any(d.end < now for d in self._dumps.values()) and time.monotonic() < deadline:
                time.sleep(POLL_S)
            for name, dumps in self._dumps.items():
                for line in dumps.flush():
                    self._take_line(name, line)
        # the stop's time is read once the stop probe has run (it returns when getpgid does): a
        # line a probe stamped before it saw the stop flag (zil.bt's spa_sync) is then never late
        self._ask_stop()
        self._stop_ns = time.monotonic_ns()
        self._stop_by = time.monotonic() + STOP_WAIT_S
        self._stopped()
        for pump in self._pumps:
            pump.join(max(0.0, self._stop_by - time.monotonic()))
        lines = self._take()
        for late in list(self._late.values()):
            lines += self._trusted(late)
        return lines

    def _trusted(self, late: list[str]) -> list[str]:
        """A probe's lines read after the stop: what it printed before the stop, and its END output.
        bpftrace detaches its probes one by one before END runs, and the ones still attached keep
        printing: a vdev queue counting issues with its completions detached shows thousands active.
        END's first line (`bye`) stamps the end of that; without it only lines from before the stop count.
        The recording window ends at the stop (zfsobs/sources/window.py): `bye` and END's lines, what
        the probes held then, carry the stop's time."""
        stamps = [ts_of(line) for line in late]
        bye = max((t for line, t in zip(late, stamps) if " bye " in line and t is not None), default=None)
        kept = [line if t is None or t <= self._stop_ns else restamp(line, self._stop_ns)
                for line, t in zip(late, stamps)
                if t is None or t <= self._stop_ns or (bye is not None and t >= bye)]
        self.dropped_at_stop += len(late) - len(kept)
        return kept

    def _take(self) -> list[str]:
        """Every line queued now, without waiting."""
        lines = []
        try:
            while True:
                lines.append(self._queue.popleft())
        except IndexError:
            return lines

    def _ask_stop(self) -> None:
        """Every tracer prints what it holds, runs END and exits (zfsobs/sources/stop_marker.py)."""
        if self._marker:
            self._marker.fire()
        else:
            self._signal(signal.SIGINT)

    def _signal(self, sig: int) -> None:
        for _, proc in self._procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass

    def close(self) -> None:
        """Stop every tracer (letting it detach its probes), then clean up. One still compiling or
        attaching has printed nothing to keep, and its stop probe may not be attached: killed (its
        perf events close with it). After finish(), what is left of its wait (STOP_WAIT_S)."""
        self._ask_stop()
        for name, proc in self._procs:
            try:
                wait = 10.0 if self._stop_by is None else max(0.0, self._stop_by - time.monotonic())
                proc.wait(wait if name in self._attached else 0)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        self._remove_dir()

    def _remove_dir(self) -> None:
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = ""
