"""The kernel lab images the kernel tests run on, and their one fidelity guest each
(scripts/kernel-fidelity), shared by tests/test_kernel_fidelity.py and tests/test_kernel_layouts.py:
one boot per image per session.

The guests the session's tests need boot in the background, in lanes: one lane as the first lab
test runs (conftest: the lab tests beside it), ZFSOBS_KLAB_PARALLEL (2) once a kernel test asks for
a guest; the ones marked alone first, with no other guest beside them, then the longest first. Each
guest runs TCG on one host thread (ZFSOBS_KLAB_TCG_THREAD=single: its vCPUs take turns), so a lane
keeps one host core busy and no more: sid's 7.2 kernel, with a host thread per vCPU, oopsed in about
one boot of three as dtrace started (an int3 left in code another vCPU had rewritten: `Oops: int3`,
docs/testing.md)."""
from __future__ import annotations

import functools
import importlib
import os
import threading
import time
from concurrent.futures import Future, TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from conftest import guest_run, kernel_lab_ready

# every guest of the session (guest_run, and the lab's own guests of tests/test_kernel_lab.py) inherits it
os.environ.setdefault("ZFSOBS_KLAB_TCG_THREAD", "single")
CACHE_SIZE = 16 << 20
# the seed stories' runs (scripts/kernel-fidelity also has awq1/awq10: awqset's two halves show the same)
SEEDS = ("slog", "noslog", "awqset", "txgt", "dirtyset")
# per image: the runs of its guest, and its module options (the vdev cache is 2.1's only). Within CI's
# budget: the tail run (the probes' END delivering open txgs) and kstat mode's run
# (tests/test_kernel_kstat.py: a boot less than a guest of its own) on the default image, the compiled
# layouts against module BTF on the newest (and bookworm's --btf image; 2.3.9's measured by hand,
# docs/fidelity.md), OpenZFS's zilstat side by side on 2.3.9, and the seed stories on 2.3.9 too: a
# guest with few possible CPUs, where a recording starts in a minute (at 255 it took 2.7 of the guest's)
IMAGES = {
    "bookworm": (("fidelity", "tail", "kstat"), ("-o", f"zfs_vdev_cache_size={CACHE_SIZE}")),
    "trixie": (("fidelity", "zilstat") + SEEDS, ()),
    "trixie-backports": (("layouts", "fidelity"), ()),
}
SEED_IMAGE = "trixie"
# per image: the possible CPUs its fidelity guest boots with (`lab --kernel --possible-cpus N`: every
# default probe loads and every equality holds on a large machine), none where absent. Bookworm's 6.1
# takes any N (the kernel parameter): 512, past the old ceilings of zil (235) and the vdev cache (449,
# 2.1's only), not 1024: a recording's start grows with the possible CPUs (its per-CPU maps are made
# for each), and at 1024 it took 6 min of the guest under TCG, twice (prefill to attached; trixie-
# backports' at 255: 2.7 min); 1024 held every equality too (docs/performance.md). Trixie's 6.12
# takes the firmware's count, at most 255 under qemu 7.2's TCG (no x2APIC there: docs/kernel-lab.md),
# past zil's old ceiling
POSSIBLE_CPUS: dict[str, int] = {"bookworm": 512, "trixie-backports": 255}
# images with a run of their own, not the fidelity checks: sid's Oracle DTrace beside bpftrace
# (tests/test_kernel_dtrace.py)
OTHERS = {"sid": (("dtrace",), ())}


@dataclass
class Image:
    distro: str
    out: Path
    runs: tuple[str, ...]
    version: str       # the module's, as the guest's /sys/module/zfs/version says (2.3.9-1)

    def has_vdev_cache(self) -> bool:        # removed in OpenZFS 2.2.0
        return self.version.split(".")[:2] in (["2", "0"], ["2", "1"])

    @property
    def recorded(self) -> tuple[str, ...]:
        """The runs recorded with `zfsobs record` (zilstat is a side-by-side of two zilstats, layouts
        a compile, kstat scripts/kernel-kstat's own run in out/kstat)."""
        return tuple(r for r in self.runs if r not in ("zilstat", "layouts", "kstat"))


@dataclass(frozen=True)
class Guest:
    """One guest run: `zfsobs lab --kernel LAB -- scripts/SCRIPT DIR ARGS`; ENV names a finished run's
    directory to check again instead (conftest.guest_run)."""
    env: str
    script: str
    args: tuple
    lab: tuple
    timeout: float
    minutes: float          # what it takes in a lane (GUESTS): the longest start first
    ready: tuple = ("stock", "bookworm")     # kernel_lab_ready's flavour and distro
    alone: bool = False     # runs before the others, with none beside it
    job: str = ""           # "module:function(out)" that drives the guest itself, instead of SCRIPT


def _fidelity(distro: str, minutes: float, alone: bool = False) -> Guest:
    runs, options = {**IMAGES, **OTHERS}[distro]
    env = "ZFSOBS_FIDELITY_DIR" + ("" if distro == "bookworm" else "_" + distro.upper().replace("-", "_"))
    cpus = ("--possible-cpus", str(POSSIBLE_CPUS[distro])) if distro in POSSIBLE_CPUS else ()
    return Guest(env, "kernel-fidelity", runs, ("--workload", "none", "--distro", distro, *cpus, *options), 2400,
                 minutes, ("stock", distro), alone)


GUESTS = {
    # each guest's minutes: what it took in the suite (2026-12-03: one host thread each, beside the
    # lab tests or another guest; a boot under TCG is 1-3 min of it), the order the lanes take them
    # in. At many possible CPUs a recording's start takes minutes of the guest (bookworm's three at
    # 512), so the seed stories run on trixie's, with 2.
    # sid's alone: beside another guest (a host thread per vCPU) its dtrace took 12.7 min instead of
    # 6, and the more load, the more skipped probe runs test_kernel_dtrace must account for
    "sid": _fidelity("sid", 12, alone=True),
    "bookworm": _fidelity("bookworm", 19), "trixie": _fidelity("trixie", 19),
    "trixie-backports": _fidelity("trixie-backports", 7.5),
    "bookworm-btf": Guest("ZFSOBS_LAYOUTS_DIR", "kernel-layouts", (), ("--btf", "--workload", "none"), 1800,
                          2, ("btf", "bookworm")),
    # `zfsobs lab --kernel -- zfsobs top` on a pty, alone: in a lane beside trixie's guest (clean-clone
    # run of 2026-11-27) the guest's fio stopped writing 69 s in, as its probes attached, and the
    # screen never showed a queue in 15 min; alone, before and since, 3.8 min and passed
    "top": Guest("ZFSOBS_TOP_DIR", "kernel-top", (), (), 1200, 8.5, job="test_kernel_lab:top_in_the_guest",
                 alone=True),
    # a command's output and exit status: a boot and a shell command (119 s in the test, before 2026-11-28)
    "command": Guest("ZFSOBS_COMMAND_DIR", "kernel-command", (), (), 1800, 1,
                     job="test_kernel_lab:command_in_the_guest"),
}
_started: dict[str, Future] = {}
_lock = threading.Lock()
_done: dict[str, Image] = {}


class _Made:
    """A tmp_path_factory whose mktemp gives a directory made beforehand, in pytest's own thread."""
    def __init__(self, path: Path):
        self.path = path

    def mktemp(self, _name: str) -> Path:
        return self.path


def wanted(items) -> list[str]:
    """The guests the session's tests use: each kernel test module's NEEDS maps a fixture to its
    guest (None: the fixture's parameter names it), the ones that run alone first, then the longest."""
    keys = set()
    for item in items:
        needs = getattr(getattr(item, "module", None), "NEEDS", {})
        for fixture in set(needs) & set(getattr(item, "fixturenames", ())):
            keys.add(needs[fixture] or item.callspec.params[fixture])
    return sorted(keys, key=lambda k: (not GUESTS[k].alone, -GUESTS[k].minutes, k))


def begin(request, lanes: int) -> None:
    """Start the session's guests, at most LANES side by side: on the first call every guest the
    session needs is queued, and a later call with more lanes opens the rest (the lab tests run
    beside one lane; the kernel tests, after them, beside ZFSOBS_KLAB_PARALLEL)."""
    with _lock:
        if not _started:
            factory = request.getfixturevalue("tmp_path_factory")
            for k in wanted(request.session.items):
                if not kernel_lab_ready(*GUESTS[k].ready):
                    _queue(k, factory)
        LANES.open(lanes)


def guest_out(key: str, request) -> Path:
    """The directory guest KEY filled, waiting for it; every guest the session needs is started
    by then, ZFSOBS_KLAB_PARALLEL (2) at a time."""
    why = kernel_lab_ready(*GUESTS[key].ready)
    if why:
        pytest.skip(why)
    begin(request, max(1, int(os.environ.get("ZFSOBS_KLAB_PARALLEL") or 2)))
    with _lock:
        if key not in _started:
            _queue(key, request.getfixturevalue("tmp_path_factory"))
    while True:      # in steps: a wait without a timeout takes no Ctrl-C
        try:
            return _started[key].result(timeout=1)
        except FutureTimeout:
            pass


def _queue(key: str, factory) -> None:
    _started[key] = Future()
    LANES.add(key, GUESTS[key].alone, _started[key], _job(GUESTS[key], factory))


def _job(g: Guest, factory) -> Callable[[], Path]:
    """Guest G's run, its directory made now (in pytest's thread): scripts/SCRIPT in the guest, or
    G's own driver; a finished run's directory in $ENV is checked again instead of either."""
    if not g.job:
        return functools.partial(guest_run, _Made(factory.mktemp(g.script)), g.env, g.script, g.args,
                                 g.timeout, g.lab)
    if os.environ.get(g.env):
        return functools.partial(Path, os.environ[g.env])
    module, name = g.job.split(":")
    out = factory.mktemp(g.script)

    def run() -> Path:
        getattr(importlib.import_module(module), name)(out)
        return out
    return run


class Lanes:
    """Jobs run in lanes, each lane one job after another in queue order, for the rest of the
    session (a job queued late is taken then). A job that runs alone waits for the others running to
    end, and none starts beside it. times: each job's start and end (time.time())."""
    def __init__(self):
        self.jobs: list = []            # (key, alone, future, run) queued, not yet started
        self.lanes = 0
        self.running = 0
        self.alone = False              # the job running now runs alone
        self.turn = threading.Condition()
        self.times: dict[str, tuple[float, float]] = {}

    def add(self, key: str, alone: bool, future: Future, run: Callable[[], Path]) -> None:
        with self.turn:
            self.jobs.append((key, alone, future, run))
            self.turn.notify_all()

    def open(self, lanes: int) -> None:
        """At least LANES lanes from now on (daemon threads: a session that ends early, a Ctrl-C,
        does not wait for their guests)."""
        with self.turn:
            for _ in range(lanes - self.lanes):
                threading.Thread(target=self._lane, name="guest", daemon=True).start()
            self.lanes = max(self.lanes, lanes)

    def _lane(self) -> None:
        while True:
            with self.turn:
                while not self.jobs or self.alone or (self.jobs[0][1] and self.running):
                    self.turn.wait()
                key, alone, future, run = self.jobs.pop(0)
                self.running += 1
                self.alone = alone
            start = time.time()
            try:
                future.set_result(run())
            except BaseException as exc:        # the test that waits for it fails with it
                future.set_exception(exc)
            finally:
                with self.turn:
                    self.times[key] = (start, time.time())
                    self.running -= 1
                    self.alone = False
                    self.turn.notify_all()


LANES = Lanes()
# per guest run: its start and end, for the session's summary (conftest)
TIMES = LANES.times


def fidelity_run(distro: str, request) -> Image:
    """The image's fidelity run, once per session (the seed tests share SEED_IMAGE's)."""
    if distro not in _done:
        out = guest_out(distro, request)
        runs = GUESTS[distro].args
        version = (out / Image(distro, out, runs, "").recorded[0] / "before" / "version").read_text().strip()
        _done[distro] = Image(distro, out, runs, version)
        write_reports(out)
    return _done[distro]


def write_reports(out: Path) -> None:
    """<run>.json beside each <run>.cap: `zfsobs report --format json` of it, made here on the host."""
    from zfsobs.capture import read_capture
    from zfsobs.views import report
    for cap in sorted(out.glob("*.cap")):
        path = cap.with_suffix(".json")
        if not path.exists():
            path.write_text(report.render(read_capture(str(cap)), "json"))
