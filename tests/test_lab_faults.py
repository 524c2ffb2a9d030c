"""Faults and exits of a real lab recording. A probe's bpftrace killed under zfsobs: the capture is
closed and valid up to that moment, the exit status non-zero with a one-line reason. SIGINT,
SIGTERM or the lab ending: an independent bpftrace saw no txg synced before the stop that the
capture lacks. Every way out leaves nothing behind: no bpftrace, no BPF program on the library,
no lab process or files, no rendered probe scripts. (SIGKILL of zfsobs: tests/test_lab_txg.py.)"""
from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from conftest import lab_ready, lab_run, still_running, truth_running, txg_rows_in, ztest_lived
from zfsobs.capture import read_capture
from zfsobs.events import Parser, parse_all
from zfsobs.sources.bpftrace import DEFAULT_PROBES
from zfsobs.targets.target import libzpool

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ok")]

ZFSOBS = [sys.executable, "-m", "zfsobs"]
PROBES = DEFAULT_PROBES


def probe_pids(name: str, owner: int | str = "[0-9]+") -> list[int]:
    """The bpftrace processes running probe `name` for zfsobs process `owner` (its temp dir's name)."""
    out = subprocess.run(["pgrep", "-f", f"zfsobs-probes-{owner}-.*/{name}.bt"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def uprobes_on_the_library() -> dict[int, str]:
    """BPF programs attached to the library, by the pid holding them: that process's command line."""
    perf = json.loads(subprocess.run(["bpftool", "-j", "perf", "list"], capture_output=True, text=True).stdout or "[]")
    holders = {}
    for entry in perf:
        if entry.get("filename") == libzpool().path:
            try:
                with open(f"/proc/{entry['pid']}/cmdline", "rb") as f:
                    holders[entry["pid"]] = f.read().replace(b"\0", b" ").decode()
            except OSError:
                holders[entry["pid"]] = "?"
    return holders


@lab_run
def test_a_probe_killed_mid_record_ends_the_capture_cleanly(tmp_path):
    cap = tmp_path / "cut.cap"
    proc = subprocess.Popen(ZFSOBS + ["record", "--lab", "-O", str(cap)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 180
        while not (cap.exists() and cap.stat().st_size > 4000):   # txgs are being written
            still_running(proc)
            assert time.time() < deadline, "no txgs recorded"
            time.sleep(0.5)
        (victim,) = probe_pids("txg", proc.pid)
        os.kill(victim, signal.SIGKILL)
        # the time it was dead by, not the time it was sent: it prints on until the kill lands (once
        # a txg line came stamped past a time taken before /bin/kill ran)
        while _alive(victim):
            time.sleep(0.001)
        killed_at = time.monotonic_ns()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
    assert proc.returncode == 1, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("zfsobs: error: bpftrace (txg) exited with status -9"), err[-2000:]
    assert "Traceback" not in err
    captured = read_capture(str(cap))
    assert not captured.warnings and captured.trailer["reason"].startswith("bpftrace (txg)"), captured.warnings
    events = parse_all(captured.lines, Parser())
    txgs = [ev for ev in events if ev.kind == "txg"]
    assert txgs and all(ev.ts < killed_at for ev in txgs)
    # nothing left: the other probes' bpftrace stopped, no BPF program on the library
    assert_nothing_left(read_capture(str(cap)).meta, proc.pid)


def _alive(pid: int) -> bool:
    """Running still: not gone, not a zombie (its parent, zfsobs, reaps it when it reads its end)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def assert_nothing_left(meta: dict, owner: int) -> None:
    """No trace of a finished session (zfsobs pid `owner`): its bpftrace, BPF programs, lab processes
    and files. Other sessions may run meanwhile (scripts/soak): only this one's things count."""
    deadline = time.time() + 20      # bpftrace may take seconds to detach its uprobes
    while any(probe_pids(n, owner) for n in PROBES) and time.time() < deadline:
        time.sleep(0.5)
    assert not any(probe_pids(n, owner) for n in PROBES)
    # no BPF program on the library is held by this session's bpftrace; others' are theirs (another
    # session's probes, another test's ground-truth bpftrace: helpers run lab tests side by side)
    ours = {pid: cmd for pid, cmd in uprobes_on_the_library().items() if f"zfsobs-probes-{owner}-" in cmd}
    assert not ours, ours
    if os.path.exists("/sys/kernel/tracing/uprobe_events"):
        with open("/sys/kernel/tracing/uprobe_events") as f:
            assert "libzpool" not in f.read()
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"-p {meta['lab']['pool']}" not in ps, ps
    assert not os.path.exists(meta["lab"]["dir"])
    assert not glob.glob(f"/tmp/zfsobs-probes-{owner}-*")


def test_a_ztest_that_fails_on_its_own_stops_the_recording_and_keeps_its_log(tmp_path):
    """ztest's pass ended by SIGABRT, as one of its own assertions ends it (CI saw one, signal 6):
    zfsobs stops with ztest's status and last line, keeps the log's tail where it says (the lab
    directory is removed), exits 0 (the recording is whole) and leaves nothing else behind."""
    cap = tmp_path / "aborted.cap"
    proc = subprocess.Popen(ZFSOBS + ["record", "--lab", "-O", str(cap)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 180
        while len(txg_rows_in(cap)) < 5:       # a pass is syncing txgs
            still_running(proc)
            assert time.time() < deadline, "no txgs recorded"
            time.sleep(0.5)
        top = subprocess.run(["pgrep", "-P", str(proc.pid), "-x", "ztest"], capture_output=True, text=True).stdout.split()
        kids = subprocess.run(["pgrep", "-P", top[0], "-x", "ztest"], capture_output=True, text=True).stdout.split()
        os.kill(int(kids[0]), signal.SIGABRT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reason = read_capture(str(cap)).trailer["reason"]
    m = re.fullmatch(r"ztest exited with status \d+: child died with signal 6; its log: (/\S+)", reason)
    assert proc.returncode == 0 and m and err.rstrip().splitlines()[-2].endswith(f"stopped: {reason}"), err[-2000:]
    try:
        assert open(m[1]).read().rstrip().endswith("child died with signal 6")
    finally:
        os.unlink(m[1])
    assert_nothing_left(read_capture(str(cap)).meta, proc.pid)


def test_a_ztest_pass_run_on_past_its_time_is_called_overdue_and_stopped(monkeypatch):
    """A --lab-time run whose pass runs on (CI: a device removal's scrub held one 230 s past a 25 s
    run, until the test's timeout) is ended by zfsobs, not by ztest's deadman 10 min later. Here
    ztest's child is stopped by SIGSTOP and the grace cut to 0: the run is overdue at twice its time."""
    from zfsobs.labs import userland
    monkeypatch.setattr(userland, "OVERDUE_S", 0)
    lab = userland.Lab(duration=3)
    with lab:
        deadline = time.time() + 60
        while True:
            kids = subprocess.run(["pgrep", "-P", str(lab.proc.pid), "-x", "ztest"],
                                  capture_output=True, text=True).stdout.split()
            if kids:
                os.kill(int(kids[0]), signal.SIGSTOP)
                break
            assert lab.alive() and time.time() < deadline, "ztest started no pass"
            time.sleep(0.05)
        while not lab.overdue():
            assert lab.alive(), lab.failure()
            assert time.time() < deadline, "never overdue"
            time.sleep(0.2)
        why = lab.failure()
        assert lab.alive()          # failure() says why; stopping is the caller's part
    m = re.fullmatch(r"ztest ran \d+ s past its 3 s run, stopped \(its pass's last operation ran on: [^)]*\)"
                     r"(: .*)?(; its log: (/\S+))?", why)    # a log ztest has not flushed yet is empty
    assert m, why
    if m[3]:
        os.unlink(m[3])
    assert lab.proc.poll() is not None
    deadline = time.time() + 30     # the stopped child, SIGKILLed, is gone once init reaps it
    while subprocess.run(["pgrep", "-g", str(lab.proc.pid)], capture_output=True).stdout:
        assert time.time() < deadline, "ztest's child outlived the lab"
        time.sleep(0.2)


# The synced state of each txg, as ZFS records it for the txgs kstat, timed by this bpftrace.
SYNCED = r"""
uprobe:LIB:spa_txg_history_set /arg2 == 4/ { printf("S %d %s %llu %llu\n", pid, str(arg0), arg1, nsecs); }
"""


MIN_TXGS = 50


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM", "lab-end"])
@lab_run
def test_every_way_out_keeps_every_txg_and_leaves_nothing_behind(tmp_path, stop):
    cap = tmp_path / "out.cap"
    args = ["record", "--lab", "-O", str(cap)] + (["--lab-time", "30"] if stop == "lab-end" else [])
    with truth_running(tmp_path, SYNCED, libzpool().path):
        proc = subprocess.Popen(ZFSOBS + args, stderr=subprocess.PIPE, text=True)
        try:
            if stop == "lab-end":
                # a 30 s ztest run took 138 s in one CI run and over 240 s in another: its last
                # pass finishes what it started (a scrub, an export and import) at the machine's pace
                _, err = proc.communicate(timeout=600)
                stopped_at = time.monotonic_ns()
            else:
                # well into ztest's test pass (docs/lab.md), by construction: the capture holds
                # enough synced txgs (ztest's pace varies with the machine's load), within a bound
                deadline = time.time() + 300
                while len(txg_rows_in(cap)) < MIN_TXGS + 10:
                    still_running(proc)
                    assert time.time() < deadline, "too slow"
                    time.sleep(1)
                stopped_at = time.monotonic_ns()
                proc.send_signal(getattr(signal, stop))
                _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    ztest_lived(err)
    assert proc.returncode == 0 and "Traceback" not in err, err[-2000:]
    captured = read_capture(str(cap))
    reason = {"SIGINT": "interrupted (SIGINT)", "SIGTERM": "terminated (SIGTERM)",
              "lab-end": "the lab's ztest run ended"}[stop]
    assert not captured.warnings and captured.trailer["reason"] == reason, (captured.warnings, captured.trailer)
    assert os.stat(cap).st_mode & 0o777 == 0o600
    ours = Counter((ev.fields["pid"], ev.fields["pool"], ev.fields["txg"])
                   for ev in parse_all(captured.lines, Parser()) if ev.kind == "txg")
    pids = {pid for pid, _, _ in ours}
    truth = Counter((int(p[1]), p[2], int(p[3])) for p in
                    (l.split() for l in (tmp_path / "truth.out").read_text().splitlines())
                    if p[:1] == ["S"] and int(p[1]) in pids and int(p[4]) < stopped_at)
    assert sum(truth.values()) >= MIN_TXGS and not truth - ours, (sum(truth.values()), list((truth - ours).items())[:5])
    assert_nothing_left(captured.meta, proc.pid)


def test_lost_events_are_counted_in_the_trailer_and_named_in_the_report(tmp_path):
    """A perf buffer of one page (BPFTRACE_PERF_RB_PAGES, bpftrace's own knob), and bpftrace stopped
    for 8 s (SIGSTOP: a reader that fell behind), so the kernel drops what the probes print meanwhile
    (the lab alone no longer overflows it: the vdev queue prints maps, not a line per vdev): bpftrace's
    own "Lost N events" reports must reach the capture, its trailer and the report, which names the
    probes that lost them."""
    cap = tmp_path / "lossy.cap"
    env = dict(os.environ, BPFTRACE_PERF_RB_PAGES="1")
    proc = subprocess.Popen(ZFSOBS + ["record", "--lab", "--duration", "30", "-O", str(cap)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (cap.exists() and cap.stat().st_size > 4000):
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read()[-2000:]
        time.sleep(0.5)
    pids = [pid for name in PROBES for pid in probe_pids(name, proc.pid)]
    assert len(pids) == len(PROBES), pids
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    # 8 s: the vdev queue probe holds its map sets while its bpftrace is stopped (no dump then), so
    # the other probes' per-txg lines must fill the page (3 s once lost none)
    time.sleep(8)
    for pid in pids:
        os.kill(pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=300)
    res = subprocess.CompletedProcess(proc.args, proc.returncode, "", err)
    assert res.returncode == 0, res.stderr[-2000:]
    captured = read_capture(str(cap))
    lost = [ev for ev in parse_all(captured.lines, Parser()) if ev.kind == "lost"]
    total = sum(ev.fields["count"] for ev in lost)
    assert total > 0 and captured.trailer["lost"] == total
    assert f" {total} lost)" in res.stderr
    report = subprocess.run(ZFSOBS + ["report", str(cap)], capture_output=True, text=True, timeout=120)
    head = report.stdout.splitlines()[:4]
    assert f"lost {total}" in head[1]
    named = {ev.fields["probe"] for ev in lost}
    assert any(l.startswith(f"warning: {total} events lost (") and all(p in l for p in named) for l in head), head


def test_a_full_filesystem_stops_the_recording_with_one_line_and_a_valid_file(tmp_path):
    """A real filesystem that fills up (a 256 KiB tmpfs) under a lab recording."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "zfsobs-test-full", str(small)], check=True)
    try:
        cap = small / "full.cap"
        proc = subprocess.Popen(ZFSOBS + ["record", "--lab", "-O", str(cap)], stderr=subprocess.PIPE, text=True)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode != 0 and "Traceback" not in err, err[-2000:]
        last = err.strip().splitlines()[-1]
        assert last == f"zfsobs: {cap}: disk full; capture stopped, it is valid up to here", err[-2000:]
        captured = read_capture(str(cap))
        # every record written is whole: at most the trailer is missing
        assert captured.warnings in ([], ["no trailer: the recording did not end cleanly (data up to the last flush is here)"])
        txgs = [ev for ev in parse_all(captured.lines, Parser()) if ev.kind == "txg"]
        assert txgs and os.path.getsize(cap) > 128 << 10
        assert_nothing_left(captured.meta, proc.pid)
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)
