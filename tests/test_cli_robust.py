"""Every subcommand with bad and edge input: exactly one `zfsobs: ...` line on stderr (or argparse's
usage and its one error line, status 2), a non-zero exit, never a traceback, and nothing started or
created. Then the guard for what nobody foresaw: an unexpected exception is one "internal error"
line and status 70, and a session's capture gets its trailer with reason `error`.
tests/test_cli.py has the bad environments (no root, no bpftrace, wrong targets): not repeated here."""
from __future__ import annotations

import glob
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib

import pytest

from conftest import lab_ready, recorded_capture, streams
from zfsobs.capture import _FILE_HEAD, _REC_HEAD, FILE_MAGIC, RECORD_MAGIC, CaptureWriter, read_capture
from zfsobs.capture.format import LINES_HEAD, deflate, record
from zfsobs.sources.bpftrace import DEFAULT_PROBES

ZFSOBS = [sys.executable, "-m", "zfsobs"]
USAGE = "argparse"          # argparse's own usage error: its usage lines, one error line, status 2
ROOT = os.geteuid() == 0
NO_ZTEST = not os.path.exists("/usr/sbin/ztest")
NEEDS = {"": [],            # what a case needs beyond a Python: the lab's ztest (not run), not root
         "ztest": [pytest.mark.lab, pytest.mark.skipif(NO_ZTEST, reason="needs ztest (zfs-test)")],
         "nobody": [pytest.mark.skipif(ROOT and not shutil.which("setpriv"), reason="root without setpriv")]}
NOBODY = 65534              # as root, the "nobody" cases run as this user


def lab(test):
    """A test that runs the real lab (root, bpftrace, ztest)."""
    return pytest.mark.lab(pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ready")(test))


# id, arguments ({name}: a file of the `files` fixture; {new}: a path no case creates), what the
# one line says (a regex), needs
CASES = [
    ("no-command", [], USAGE, ""),
    ("unknown-command", ["frobnicate"], USAGE, ""),
    ("unknown-global-flag", ["--frob", "top"], USAGE, ""),
    ("top-unknown-flag", ["top", "--frob"], USAGE, ""),
    ("top-interval-0", ["top", "--interval", "0"], USAGE, ""),
    ("top-interval-negative", ["top", "--interval", "-1"], USAGE, ""),
    ("top-interval-word", ["top", "--interval", "often"], USAGE, ""),
    ("top-interval-nan", ["top", "--interval", "nan"], USAGE, ""),
    ("top-duration-0", ["top", "--duration", "0"], USAGE, ""),
    ("top-lab-time-negative", ["top", "--lab", "--lab-time", "-5"], USAGE, ""),
    ("top-lab-and-target", ["top", "--lab", "--target", "libzpool"], USAGE, ""),
    ("top-source-unknown", ["top", "--source", "dtrace"], USAGE, ""),
    ("top-target-unknown", ["top", "--target", "zfs-on-the-moon"], "unknown target 'zfs-on-the-moon'", ""),
    ("top-target-missing", ["top", "--target", "/nonexistent/libzpool.so"], "no such library", ""),
    ("top-output-directory", ["top", "-O", "{dir}"], "is a directory; name the capture file", ""),
    ("top-output-exists", ["top", "--record", "{cap}"], "exists; choose another name or pass --force", ""),
    ("top-tunable-without-lab", ["top", "-o", "zfs_txg_timeout=1", "--target", "libzpool"], "for the lab only", ""),
    ("top-tunable-unknown", ["top", "--lab", "-o", "zfs_txg_timeoutt=5"],
     "zfs_txg_timeoutt: not a tunable this libzpool .* did you mean zfs_txg_timeout", "ztest"),
    ("top-tunable-negative", ["top", "--lab", "-o", "zfs_txg_timeout=-1"], "zfs_txg_timeout takes a whole number from 0 to 4294967295", "ztest"),
    ("top-tunable-too-big", ["top", "--lab", "-o", "zfs_txg_timeout=4294967296"], "32-bit", "ztest"),
    ("zilstat-interval-0", ["zilstat", "0"], r"interval: must be > 0: '0' \(seconds, or 'txg'\)", ""),
    ("zilstat-interval-negative", ["zilstat", "-1"], "interval: must be > 0", ""),
    ("zilstat-interval-inf", ["zilstat", "inf"], "interval: must be a finite number", ""),
    ("zilstat-count-negative", ["zilstat", "1", "-1"], "count must be >= 1: -1", ""),
    ("zilstat-count-word", ["zilstat", "1", "many"], USAGE, ""),
    ("zilstat-txg-count-0", ["zilstat", "txg", "0"], "count must be >= 1: 0", ""),
    ("zilstat-header-negative", ["zilstat", "-l", "-1", "1", "1"], "-l must be >= 0", ""),
    ("zilstat-extra-word", ["zilstat", "1", "1", "more"], USAGE, ""),
    ("zilstat-tunable-garbage", ["zilstat", "--lab", "-o", "garbage"], "expected NAME=INTEGER", "ztest"),
    ("vqstat-interval-0", ["vqstat", "0"], USAGE, ""),
    ("vqstat-interval-negative", ["vqstat", "-5"], USAGE, ""),
    ("vqstat-interval-word", ["vqstat", "abc"], USAGE, ""),
    ("vqstat-count-0", ["vqstat", "1", "0"], "count must be >= 1: 0", ""),
    ("vqstat-count-negative", ["vqstat", "1", "-3"], "count must be >= 1: -3", ""),
    ("vqstat-target-not-elf", ["vqstat", "--target", "{plain}"], "not an ELF shared library", ""),
    ("vqstat-workload-unknown", ["vqstat", "--lab", "--workload", "nfs"], "no lab workload 'nfs'", "ztest"),
    ("record-no-output", ["record", "--lab"], USAGE, ""),
    ("record-output-missing-value", ["record", "-O"], USAGE, ""),
    ("record-output-directory", ["record", "-O", "{dir}"], "is a directory; name the capture file", ""),
    ("record-output-exists", ["record", "-O", "{cap}", "--lab"], "exists; choose another name", ""),
    ("record-duration-0", ["record", "-O", "{new}", "--duration", "0"], USAGE, ""),
    ("record-duration-negative", ["record", "-O", "{new}", "--duration", "-3"], USAGE, ""),
    ("record-nothing-after-dashes", ["record", "-O", "{new}", "--lab", "--"], "record: nothing after --", ""),
    # the mistyped command: a zfsobs option after --
    ("record-option-after-dashes", ["record", "--lab", "--duration", "5", "-O", "{new}", "--", "-o",
                                    "zfs_vdev_cache_size=1"], r"-- -o: command not found \(a zfsobs option\?", ""),
    ("record-command-not-found", ["record", "-O", "{new}", "--lab", "--", "zfsobs-no-such-command"],
     "-- zfsobs-no-such-command: command not found", ""),
    ("record-command-missing-file", ["record", "-O", "{new}", "--", "/nonexistent/run-me"], "no such file", ""),
    ("record-command-directory", ["record", "-O", "{new}", "--", "{dir}"], "is a directory, not a command", ""),
    ("record-command-not-executable", ["record", "-O", "{new}", "--", "{plain}"], "not executable", ""),
    ("record-tunable-without-lab", ["record", "-O", "{new}", "-o", "zfs_txg_timeout=5"], "for the lab only", ""),
    ("record-tunable-unknown", ["record", "--lab", "-O", "{new}", "-o", "zfs_no_such_tunable=1"],
     "zfs_no_such_tunable: not a tunable this libzpool", "ztest"),
    ("record-old-output-twice", ["record", "--lab", "-o", "{new}", "-o", "{cap}"], "-o takes NAME=VALUE", ""),
    ("record-target-unknown", ["record", "-O", "{new}", "--target", "solaris"], "unknown target", ""),
    ("replay-no-file", ["replay"], USAGE, ""),
    ("replay-missing", ["replay", "{dir}/none.cap"], "no such file", ""),
    ("replay-empty", ["replay", "{empty}"], "not a zfsobs capture", ""),
    ("replay-directory", ["replay", "{dir}"], "is a directory, not a capture", ""),
    ("replay-unreadable", ["replay", "{unreadable}"], "cannot read: Permission denied", "nobody"),
    ("replay-endless-device", ["replay", "/dev/zero"], "is a device, not a capture", ""),
    ("replay-speed-0", ["replay", "--speed", "0", "{cap}"], USAGE, ""),
    ("report-empty", ["report", "{empty}"], "not a zfsobs capture", ""),
    ("report-directory", ["report", "{dir}"], "is a directory, not a capture", ""),
    ("report-unreadable", ["report", "{unreadable}"], "cannot read: Permission denied", "nobody"),
    ("report-future-format", ["report", "{future}"], "newer than this zfsobs reads", ""),
    ("report-section-unknown", ["report", "{cap}", "--format", "csv", "--section", "nope"], "no section 'nope'", ""),
    ("compare-foreign", ["report", "--compare", "{foreign}"], "not a zfsobs capture", ""),
    ("compare-empty", ["report", "--compare", "--format", "csv", "{empty}"], "not a zfsobs capture", ""),
    ("compare-format-unknown", ["report", "--compare", "--format", "xml", "{cap}"], USAGE, ""),
    ("openmetrics-step-0", ["report", "{cap}", "--format", "openmetrics", "--step", "0"], USAGE, ""),
    ("exporter-listen-no-port", ["exporter", "--listen", "localhost"], "want HOST:PORT", ""),
    ("exporter-listen-port-0", ["exporter", "--listen", "127.0.0.1:0"], "want HOST:PORT", ""),
    ("lab-duration-0", ["lab", "--duration", "0"], USAGE, ""),
    ("lab-duration-word", ["lab", "--duration", "long"], USAGE, ""),
    ("lab-unknown-word", ["lab", "frob"], "lab: unknown argument 'frob'", ""),
    ("lab-command-without-kernel", ["lab", "--", "true"], "only with --kernel", ""),
    ("lab-layout-without-kernel", ["lab", "--layout", "mirror"], "--layout: only with --kernel", ""),
    ("lab-tunable-unknown", ["lab", "-o", "zfs_no_such_tunable=1"], "not a tunable this libzpool", "ztest"),
    ("lab-tunable-too-big", ["lab", "-o", "zfs_txg_timeout=99999999999"], "32-bit", "ztest"),
    ("lab-workload-unknown", ["lab", "--workload", "nfs"], "no lab workload 'nfs'", "ztest"),
    ("lab-set-nothing", ["lab", "set"], "which tunable", ""),
    ("lab-set-pid-missing", ["lab", "set", "zfs_txg_timeout=5", "--pid"], "--pid needs a process id", ""),
    ("lab-set-pid-word", ["lab", "set", "zfs_txg_timeout=5", "--pid", "abc"], "--pid needs a process id", ""),
    ("lab-set-pid-not-a-lab", ["lab", "set", "zfs_txg_timeout=5", "--pid", "1"],
     "--pid 1: not a running lab's ztest|run it as root", ""),
    ("lab-set-garbage", ["lab", "set", "garbage", "--pid", "1"], "not a running lab's ztest|run it as root", ""),
    # lab --kernel: argument errors only, all found before a guest could boot
    ("kernel-no-command", ["lab", "--kernel"], "give the command to run in the guest", ""),
    ("kernel-nothing-after-dashes", ["lab", "--kernel", "--"], "lab --kernel: nothing after --", ""),
    ("kernel-duration", ["lab", "--kernel", "--duration", "5", "--", "true"], "does not take --duration", ""),
    ("kernel-layout", ["lab", "--kernel", "--layout", "raidz9", "--", "true"], "no layout 'raidz9'", ""),
    ("kernel-disk-size-word", ["lab", "--kernel", "--disk-size", "huge", "--", "true"], "not a size: 'huge'", ""),
    ("kernel-disk-size-0", ["lab", "--kernel", "--disk-size", "0", "--", "true"], "too small", ""),
    ("kernel-workload", ["lab", "--kernel", "--workload", "nope", "--", "true"], "no kernel lab workload", ""),
    ("kernel-share-missing", ["lab", "--kernel", "--share", "{dir}/none", "--", "true"], "not a directory", ""),
    ("kernel-timeout-0", ["lab", "--kernel", "--timeout", "0", "--", "true"], USAGE, ""),
    ("kernel-tunable-garbage", ["lab", "--kernel", "-o", "garbage", "--", "true"], "use NAME=VALUE", ""),
    ("probes-no-action", ["probes"], USAGE, ""),
    ("probes-unknown-action", ["probes", "frob"], USAGE, ""),
    ("probes-show-nothing", ["probes", "show"], r"which probe\? \(", ""),
    ("probes-list-a-name", ["probes", "list", "txg"], "probes list takes no name", ""),
    ("probes-show-directory-target", ["probes", "show", "zil", "--target", "{dir}"], "is a directory", ""),
    ("doctor-extra-word", ["doctor", "now"], USAGE, ""),
]


def run(args, user=None, env=None, timeout=60, **kw):
    cmd = ZFSOBS + list(args)
    if user:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, **kw)


def one_line(res, pattern: str) -> str:
    """The run failed with one `zfsobs: ` line matching `pattern` (or argparse's usage error)."""
    assert "Traceback" not in res.stderr + res.stdout, res.stderr
    assert res.returncode != 0, res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    if pattern == USAGE:
        assert res.returncode == 2 and lines[0].startswith("usage: zfsobs"), res.stderr
        errors = [line for line in lines if re.match(r"zfsobs( \w+)?: error: ", line)]
        assert len(errors) == 1 and errors[0] == lines[-1], res.stderr
        return lines[-1]
    assert len(lines) == 1 and lines[0].startswith("zfsobs: "), res.stderr
    assert re.search(pattern, lines[0]), (pattern, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def files():
    """Bad and good inputs, in a directory any user can read (for the runs as nobody)."""
    base = tempfile.mkdtemp(prefix="zfsobs-robust-")
    os.chmod(base, 0o755)
    with open(recorded_capture(), "rb") as f:
        cap = f.read()
    contents = {"cap": cap, "unreadable": cap, "foreign": b"PK\x03\x04 a zip file, not a capture", "empty": b"",
                "future": _FILE_HEAD.pack(FILE_MAGIC, 99), "plain": b"just text\n",
                "noshebang": b"echo a script without #!\n"}
    paths = {"base": base, "dir": os.path.join(base, "dir")}
    os.mkdir(paths["dir"])
    for name, data in contents.items():
        paths[name] = os.path.join(base, name)
        with open(paths[name], "wb") as f:
            f.write(data)
        os.chmod(paths[name], {"unreadable": 0o000, "noshebang": 0o755}.get(name, 0o644))
    yield paths
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("args, pattern, needs", [pytest.param(*c[1:], id=c[0], marks=NEEDS[c[3]]) for c in CASES])
def test_bad_input_is_one_line(args, pattern, needs, files, request):
    new = os.path.join(files["base"], f"new-{request.node.callspec.id}.cap")
    args = [a.format(**files, new=new) for a in args]
    one_line(run(args, user=NOBODY if ROOT and needs == "nobody" else None), pattern)
    assert not os.path.exists(new), "created the capture of a run that failed"
    assert open(files["cap"], "rb").read() == open(recorded_capture(), "rb").read()


def test_every_subcommand_is_in_the_table():
    from zfsobs.cli_parser import parser
    sub = next(a for a in parser()._actions if a.dest == "cmd")
    covered = {args[0] for _, args, _, _ in CASES if args and not args[0].startswith("-")}
    assert set(sub.choices) <= covered, set(sub.choices) - covered


# -- the guard: an unexpected exception ------------------------------------------------------------

def many_vdevs(path: str, records: int = 16, per: int = 4000, pad: int = 3500) -> None:
    """A well-formed capture, each record within the reader's bounds, naming records*per leaf vdevs
    with paths near PATH_MAX: ~230 MB of model state from a 1.8 MB file, fine on a big machine, too
    much for a small one."""
    CaptureWriter(path, {"source": "bpftrace"}, force=True).abandon()
    with open(path, "ab") as f:
        n = 0
        for seq in range(records):
            lines = []
            for _ in range(per):
                n += 1
                lines.append(f"zfsobs 1 vq_vdev 1000 pool=p pid=1 vd=0x{n:x} guid={n} final=0 vdev_max=1000 "
                             f"path=/{'a' * pad}{n}\n".encode())
            body = LINES_HEAD.pack(seq, 1000, 1000) + zlib.compress(b"".join(lines), 1)
            f.write(_REC_HEAD.pack(RECORD_MAGIC, b"E", len(body), zlib.crc32(b"E" + body)) + body)
        f.write(record(b"T", deflate(b'{"reason": "quit"}')))     # no warning line before the error


def test_out_of_memory_is_an_internal_error_line(tmp_path):
    """A real trigger: a capture larger than the memory zfsobs may use (RLIMIT_AS). MemoryError is
    no ZfsobsError: the guard turns it into one line and status 70; ZFSOBS_DEBUG=1 adds the traceback."""
    limit = 128 << 20

    def small():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    control = run(["report", recorded_capture()], preexec_fn=small)
    assert control.returncode == 0, f"zfsobs needs more than {limit >> 20} MiB here: {control.stderr}"
    bomb = str(tmp_path / "big.cap")
    many_vdevs(bomb)
    line = one_line(run(["report", bomb], preexec_fn=small), "internal error")
    assert re.fullmatch(r"zfsobs: internal error: MemoryError(: .+)?; ZFSOBS_DEBUG=1 shows the traceback", line)
    res = run(["report", bomb], preexec_fn=small, env=dict(os.environ, ZFSOBS_DEBUG="1"))
    assert res.returncode == 70 and "Traceback (most recent call last)" in res.stderr
    assert res.stderr.strip().splitlines()[-1] == line


class FakeSource:
    """The source's interface over recorded lab lines; fails like a bug after handing `good` over."""
    tracer, unavailable, pids, attached, ended, dropped_at_stop = "fake", {}, {}, True, "", 0

    def __init__(self, target, lines, good):
        self.target, self.lines, self.good, self.closed = target, list(lines), good, False
        self.meta = {"source": "fake", "target": {"kind": "libzpool", "path": "/fake"}, "tunables": {}}
        self.given = []

    def start(self):
        return self

    def poll(self, timeout):
        if len(self.given) >= self.good:
            raise RuntimeError("a bug in a source")
        batch = self.lines[len(self.given):len(self.given) + 400]
        self.given += batch
        return batch

    def finish(self):
        return []

    def close(self):
        self.closed = True


@pytest.fixture
def fake_session(session_with_source):
    """zfsobs.session with a fake source and watcher: a session without root or bpftrace."""
    lines = read_capture(recorded_capture()).lines
    made = {}
    target = session_with_source(lambda target: made["source"])
    made["source"] = FakeSource(target, lines, good=min(len(lines) // 2, 4000))
    return made["source"]


def test_an_internal_error_in_a_session_closes_its_capture(fake_session, tmp_path, capsys):
    """Nothing handed over before the error is lost; the trailer says `error` and what it was."""
    from zfsobs import cli
    from zfsobs.events import is_event_line
    cap = str(tmp_path / "x.cap")
    assert cli.main(["record", "-O", cap, "--target", "fake"]) == 70
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "zfsobs: internal error: RuntimeError: a bug in a source; ZFSOBS_DEBUG=1 shows the traceback"
    assert len(err) == 2 and err[0].startswith("zfsobs: recording "), err
    got = read_capture(cap)
    assert not got.warnings and fake_session.closed
    assert got.trailer["reason"] == "error" and got.trailer["error"] == "RuntimeError: a bug in a source"
    assert streams(got.lines) == streams([line for line in fake_session.given if is_event_line(line)])
    assert got.trailer["lines"] == len(got.lines) > 1000


@pytest.mark.parametrize("where", ["watcher", "capture", "pipeline", "command"])
def test_startup_failing_part_way_cleans_up(where, fake_session, monkeypatch, tmp_path, capsys, files):
    """Whatever step of startup fails, cleanup runs with what there is, and a capture already
    created gets its trailer (a failure between the capture and the pipeline was an AttributeError)."""
    from zfsobs import cli, session

    def fail(*a, **kw):
        raise OSError(5, "Input/output error")

    command = []
    if where == "command":
        command = ["--", files["noshebang"]]      # a real trigger: exec() cannot run it (ENOEXEC)
    else:
        monkeypatch.setattr(session, {"watcher": "watcher_for", "capture": "CaptureWriter",
                                      "pipeline": "Pipeline"}[where], fail)
    cap = tmp_path / "x.cap"
    status = cli.main(["record", "-O", str(cap), "--target", "fake", *command])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fake_session.closed, err
    if where == "command":
        assert status == 126 and err[0] == f"zfsobs: cannot run {files['noshebang']}: Exec format error"
    else:
        assert status == 70 and err[0].startswith("zfsobs: internal error: OSError: [Errno 5] Input/output error")
    assert cap.exists() == (where in ("pipeline", "command"))
    if cap.exists():
        got = read_capture(str(cap))
        assert got.trailer["reason"] == "error" and not got.warnings
        assert got.trailer["error"] == {"pipeline": "OSError: [Errno 5] Input/output error",
                                        "command": f"cannot run {files['noshebang']}: Exec format error"}[where]


# -- with the lab: root, bpftrace, ztest -----------------------------------------------------------

def procs(pids="[0-9]*") -> list[str]:
    """The command lines of these processes (a glob of /proc)."""
    out = []
    for path in glob.glob(f"/proc/{pids}/cmdline"):
        try:
            with open(path, "rb") as f:
                out.append(f.read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    return out


def children(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = f.read().split()
    except OSError:
        return []
    return [c for kid in kids for c in procs(kid)]


def left_by(pid: int) -> list[str]:
    """What a zfsobs process left: its probes' bpftraces, its lab's ztest, their files."""
    running = [c for c in procs() if f"zfsobs-probes-{pid}-" in c or f"zfsobs_lab_{pid} " in c + " "]
    return running + [p for pattern in (f"/dev/shm/zfsobs-lab-{pid}-*", f"/var/tmp/zfsobs-lab-{pid}-*",
                                        f"{tempfile.gettempdir()}/zfsobs-probes-{pid}-*") for p in glob.glob(pattern)]


@lab
@pytest.mark.parametrize("moment", ["first child", "between probes", "every probe started"])
def test_ctrl_c_during_record_lab_startup(moment, tmp_path):
    """SIGINT while `record --lab` starts: at its first helper process (ldd, nm, bpftrace --version
    or already a probe), as soon as a probe's bpftrace runs and the next ones are being started (CI
    once caught the last one inside Popen: it outlived zfsobs), or once every probe's bpftrace is
    compiling and attaching. One line, status 130, no capture, nothing left running."""
    cap = tmp_path / "x.cap"
    proc = subprocess.Popen(ZFSOBS + ["record", "--lab", "-O", str(cap)], stderr=subprocess.PIPE, text=True)
    probes = f"zfsobs-probes-{proc.pid}-"
    wanted = {"first child": 1, "between probes": 1, "every probe started": len(DEFAULT_PROBES)}[moment]
    deadline = time.monotonic() + 60
    while len([c for c in children(proc.pid) if moment == "first child" or probes in c]) < wanted:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.002)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err == "zfsobs: interrupted (SIGINT)\n", err
    assert not cap.exists() and not left_by(proc.pid)


@lab
@pytest.mark.parametrize("cmd", [["record", "--lab", "-O"], ["top", "--lab", "-O"], ["zilstat", "--lab", "-O"],
                                 ["vqstat", "--lab", "--record"]])
def test_an_unwritable_capture_is_refused_before_the_lab_starts(cmd, tmp_path):
    """A read-only filesystem (root writes anywhere else): refused before any probe or lab starts."""
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "zfsobs-test-ro", str(ro)], check=True)
    try:
        res = run(cmd + [str(ro / "x.cap")])
        one_line(res, "cannot create capture: read-only file system")
    finally:
        subprocess.run(["umount", "-l", str(ro)], check=False)


@lab
def test_o_is_a_tunable_in_record_and_the_old_o_file_still_records(tmp_path):
    """`-o NAME=VALUE` sets a lab tunable in record as in lab; `-o FILE` (the old -O) still works, with a note."""
    cap = tmp_path / "x.cap"
    res = run(["record", "--lab", "--duration", "2", "-o", "zfs_txg_timeout=3", "-o", str(cap)], timeout=120)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert "zfsobs: note: record -o FILE is the old spelling of -O FILE" in res.stderr
    got = read_capture(str(cap))
    assert got.meta["tunables"] == {"zfs_txg_timeout": 3} and got.trailer["reason"] == "duration reached"
