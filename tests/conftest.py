"""Shared fixtures. Captures in tests/data were recorded from real runs (real bpftrace on the real
libzpool under the lab's ztest); re-record them with ./scripts/record-fixtures."""
from __future__ import annotations

import contextlib
import functools
import glob
import inspect
import os
import re
import shutil
import subprocess
import sys
import time
import warnings

import pytest

DATA = os.path.join(os.path.dirname(__file__), "data")


def streams(lines: list[str]) -> tuple[list[str], list[str]]:
    """A capture's two streams of lines, each in the order it came: the digested counter lines
    (V records) and all others (E records). Between them, the order follows the records' flushes."""
    from zfsobs.capture.digest import digestible
    from zfsobs.events import Parser
    parser, counters, others = Parser(), [], []
    for line in lines:
        ev = parser.parse(line)
        (counters if ev is not None and digestible(ev) else others).append(line)
    return counters, others


def recorded_capture() -> str:
    paths = sorted(glob.glob(os.path.join(DATA, "lab-*.cap")))
    assert paths, "tests/data has no recorded capture; run ./scripts/record-fixtures"
    return paths[-1]


GUEST_OOPS = re.compile(r"RIP: 0010:\S+")    # a kernel-mode fault on the guest console
# sid's guest oopsed in 3 boots of 7 on 2026-11-27 and 2 of 6 on 2026-11-28 (below): at ~1 in 3,
# three boots all oopsing is ~4 % of CI runs, five ~0.4 %; a boot that does not oops costs nothing
GUEST_ATTEMPTS = 5


def guest_run(tmp_path_factory, env_dir: str, script: str, args=(), timeout: float = 1200,
              lab=("--workload", "none")):
    """The directory a kernel lab guest filled running scripts/SCRIPT DIR ARGS (`env_dir` names a
    variable that points at a finished run instead, to check it again while changing tests)."""
    import pathlib
    import sys
    if os.environ.get(env_dir):
        return pathlib.Path(os.environ[env_dir])
    out = tmp_path_factory.mktemp(script)
    cmd = [sys.executable, "-m", "zfsobs", "lab", "--kernel", *lab, "--share", str(out), "--",
           f"scripts/{script}", str(out), *args]
    for attempt in range(1, GUEST_ATTEMPTS + 1):
        res = subprocess.run(cmd, cwd=os.path.dirname(os.path.dirname(DATA)), capture_output=True, text=True,
                             timeout=timeout)
        oops = GUEST_OOPS.search(res.stderr)
        if res.returncode == 0 or attempt == GUEST_ATTEMPTS or not oops:
            break
        # the guest's own kernel oopsed (sid's 7.2 under TCG, 3 boots of 7 on 2026-11-27, in
        # handle_mm_fault or __schedule as dtrace started): the emulator's, not zfsobs's; boot again
        warnings.warn(f"{script}: the guest's kernel oopsed ({oops[0]}); booting it again")
        for entry in out.iterdir():
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def load_capture(path: str, kind: str):
    """(capture, a whole-capture Model fed with it, its events of `kind`)."""
    from zfsobs.capture import read_capture
    from zfsobs.events import Parser, parse_all
    from zfsobs.model import Model
    capture = read_capture(str(path))
    model = Model(keep=None)
    events = list(parse_all(capture.lines, Parser()))
    for ev in events:
        model.feed(ev)
    return capture, model, [ev for ev in events if ev.kind == kind]


@pytest.fixture
def capture_path() -> str:
    return recorded_capture()


def txg_rows_in(cap) -> list[dict]:
    """The txg events' fields in a capture being written (a reader sees its whole records so far):
    lab tests stop a recording once it holds what they check, not after a fixed time."""
    from zfsobs.capture import read_capture
    from zfsobs.events import Parser
    if not os.path.exists(cap) or os.path.getsize(cap) < 1000:
        return []
    parser = Parser()
    return [ev.fields for ev in map(parser.parse, read_capture(str(cap)).lines) if ev and ev.kind == "txg"]


def lab_ready() -> str:
    """Why the lab tests cannot run here, or '' when they can."""
    if os.geteuid() != 0:
        return "needs root"
    if not shutil.which("bpftrace"):
        return "needs bpftrace"
    if not os.path.exists("/usr/sbin/ztest"):
        return "needs ztest (zfs-test)"
    return ""


# How zfsobs names a lab whose ztest failed (zfsobs/labs/userland.py: Lab.failure).
ZTEST_FAILED = re.compile(r"ztest (exited with status -?\d+|ran \d+ s past its).*")
LAB_ATTEMPTS = 3


class ZtestFailed(Exception):
    """The lab's ztest ended on a failure of its own, which no lab test can compare with its truth."""


def ztest_lived(*texts: str) -> None:
    """Raise ZtestFailed if any of TEXTS (zfsobs's stderr, a trailer's reason) says the lab's ztest
    failed. ztest is OpenZFS's randomized stress test, and now and then one of its own assertions
    ends a run (signal 6: stop 31's CI, one lab run of ~25; docs/testing.md). Cut short so, a run
    cannot match its truth (that one lost a ZIL commit in flight), and it is ztest's failure, not
    zfsobs's: @lab_run runs the lab again."""
    for text in texts:
        if m := ZTEST_FAILED.search(text or ""):
            raise ZtestFailed(m[0])


def still_running(proc: subprocess.Popen) -> None:
    """Assert that zfsobs (PROC, stderr piped) still runs; if it ended, its stderr says why."""
    if proc.poll() is not None:
        err = proc.stderr.read() if proc.stderr else ""
        ztest_lived(err)
        raise AssertionError(f"zfsobs ended early (status {proc.returncode}): {err[-2000:]}")


def lab_ztest(zfsobs_pid: int, timeout: float = 120) -> int:
    """The pid of the ztest parent of the lab that the zfsobs process ZFSOBS_PID runs (its pool is
    zfsobs_lab_<ZFSOBS_PID>), waiting up to TIMEOUT s for it to start: what a test passes to
    `zfsobs lab set --pid`, so that the test acts on its own lab whatever other labs run here."""
    from zfsobs.labs.knob import POOL_PREFIX, _lab_parents
    deadline = time.monotonic() + timeout
    while True:
        found = [pid for pid, pool in _lab_parents().items() if pool == f"{POOL_PREFIX}{zfsobs_pid}"]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"zfsobs {zfsobs_pid}: no lab ztest within {timeout} s"
        time.sleep(0.2)


def lab_set(zfsobs_pid: int, *assignments: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`zfsobs lab set ASSIGNMENTS --pid` on the lab of the zfsobs process ZFSOBS_PID (never a plain
    `lab set`, which refuses when two labs run and would write into another's)."""
    return subprocess.run([sys.executable, "-m", "zfsobs", "lab", "set", *assignments,
                           "--pid", str(lab_ztest(zfsobs_pid))], capture_output=True, text=True, timeout=timeout)


def lab_run(fn):
    """For a fixture or test that runs the lab: call it again, up to LAB_ATTEMPTS times in all, if it
    raises ZtestFailed (ztest_lived), or an AssertionError whose message says the lab's ztest failed,
    each retry a warning in pytest's summary. A generator fixture
    is retried up to its yield; a test's tmp_path is emptied for its next attempt."""
    def attempts(call, tmp_path=None):
        for attempt in range(1, LAB_ATTEMPTS + 1):
            try:
                try:
                    return call()
                except AssertionError as exc:
                    ztest_lived(str(exc))       # a check that failed because ztest ended the run
                    raise
            except ZtestFailed as exc:
                if attempt == LAB_ATTEMPTS:
                    raise
                warnings.warn(f"{fn.__name__}: the lab's {exc}; running it again "
                              f"(attempt {attempt + 1} of {LAB_ATTEMPTS})")
                for entry in tmp_path.iterdir() if tmp_path else ():
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def generator(*args, **kwargs):
            def first():
                gen = fn(*args, **kwargs)
                return gen, next(gen)
            gen, value = attempts(first)
            yield value
            next(gen, None)
        return generator

    @functools.wraps(fn)
    def plain(*args, **kwargs):
        return attempts(lambda: fn(*args, **kwargs), kwargs.get("tmp_path"))
    return plain


def kernel_lab_ready(flavour: str = "stock", distro: str = "bookworm") -> str:
    """Why the kernel lab tests cannot run here, or '' when they can: they boot a guest, so they run
    where its image (of that distro and flavour: stock, or btf) is built (./scripts/test builds them
    all) unless ZFSOBS_KERNEL_LAB=0."""
    if os.environ.get("ZFSOBS_KERNEL_LAB") == "0":
        return "ZFSOBS_KERNEL_LAB=0"
    if os.geteuid() != 0:
        return "needs root"
    from zfsobs.labs.guest import builder_command, image_dir
    img = image_dir(flavour=flavour, distro=distro)
    if not (img / "complete").is_file():
        return f"no kernel lab image at {img} ({' '.join(builder_command(flavour, distro))} builds it)"
    return ""


def pytest_collection_modifyitems(config, items):
    """Fast tests first, then the real-lab tests, the kernel lab's last, so a failure shows early."""
    items.sort(key=lambda item: (item.get_closest_marker("kernel") is not None,
                                 item.get_closest_marker("lab") is not None))


@pytest.fixture(autouse=True)
def _guests_beside_the_lab(request):
    """A session that runs kernel tests after lab tests starts its kernel lab guests as the first
    lab test runs, one at a time (tests/kernel_images.py begin: a guest keeps one host core busy,
    the lab tests the other), and opens the other lanes when the kernel tests begin."""
    images = sys.modules.get("kernel_images")
    if images and request.node.get_closest_marker("lab") and not request.node.get_closest_marker("kernel"):
        images.begin(request, 1)


def pytest_terminal_summary(terminalreporter):
    """Each kernel lab guest's wall time, in start order: where the kernel tier's minutes went."""
    images = sys.modules.get("kernel_images")
    for key, (start, end) in sorted(getattr(images, "TIMES", {}).items(), key=lambda kv: kv[1]):
        terminalreporter.write_line(f"guest {key}: {time.strftime('%H:%M:%S', time.localtime(start))} to "
                                    f"{time.strftime('%H:%M:%S', time.localtime(end))}, {end - start:.0f} s")


@contextlib.contextmanager
def truth_running(tmp, script: str, library: str, stop_timeout: float = 120):
    """An independent ground-truth bpftrace (the test's own script, LIB = the library) writing
    tmp/truth.out, attached before the body runs and stopped (its END output written) after it.
    It is stopped the way zfsobs stops its own (zfsobs/sources/stop_marker.py): bpftrace 0.17 can lose a
    SIGINT for good (CI once saw one sit 300 s in epoll_wait after it)."""
    from zfsobs.sources.stop_marker import StopMarker
    marker = StopMarker()
    path = tmp / "truth.bt"
    path.write_text(script.replace("LIB", library) + marker.probe())
    with open(tmp / "truth.out", "w") as out:
        proc = subprocess.Popen(["bpftrace", str(path)], stdout=out, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 60
            while "Attaching" not in (tmp / "truth.out").read_text():
                assert proc.poll() is None and time.time() < deadline, "ground-truth bpftrace did not start"
                time.sleep(0.2)
            yield proc
        finally:
            marker.fire()
            try:
                proc.wait(stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise


@pytest.fixture
def session_with_source(monkeypatch):
    """A function that makes zfsobs.session run on MAKE(target)'s source (and a watcher that reads
    nothing): a session without root or bpftrace. It returns the target; the signal handlers the
    session sets are restored afterwards."""
    import signal
    import types
    from zfsobs import session
    from zfsobs.targets.target import Target

    def install(make):
        target = Target("libzpool", "/fake", "2.1.11")
        monkeypatch.setattr(session, "resolve", lambda spec: target)
        monkeypatch.setattr(session, "make_source", lambda *a, **kw: make(target))
        watcher = types.SimpleNamespace(names=[], poll=lambda: [], close=lambda: None)
        monkeypatch.setattr(session, "watcher_for", lambda *a, **kw: watcher)
        return target
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield install
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
