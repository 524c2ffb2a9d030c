"""Shared fixtures. Captures in tests/data were recorded from real runs (real bpftrace on the real
libzpool under the lab's ztest); re-record them with ./scripts/record-fixtures."""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import time

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
    res = subprocess.run(cmd, cwd=os.path.dirname(os.path.dirname(DATA)), capture_output=True, text=True,
                         timeout=timeout)
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
