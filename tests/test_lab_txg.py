"""End to end on real OpenZFS: `zfsobs record --lab` traces ztest's libzpool with real bpftrace
uprobes, and an independent bpftrace in the same run is the ground truth for every txg."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import lab_ready, lab_run, still_running, truth_running, txg_rows_in, ztest_lived
from zfsobs.capture import read_capture
from zfsobs.events import Parser
from zfsobs.procs import holds, scan
from zfsobs.targets.target import libzpool

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ok")]

ZFSOBS = [sys.executable, "-m", "zfsobs"]
# Ground truth, written independently of probes/linux/txg.bt: ZFS's own per-state completion
# times (what the txgs kstat's stime is made of: WAIT_FOR_SYNC=3 -> SYNCED=4) and a separate
# spa_sync entry/return pair in another bpftrace process.
TRUTH = r"""
uprobe:LIB:spa_txg_history_set /arg2 == 3/ { @w[pid, arg0, arg1] = arg3; }
uprobe:LIB:spa_txg_history_set /arg2 == 4 && @w[pid, arg0, arg1]/ {
    printf("S %d %s %llu %llu %llu\n", pid, str(arg0), arg1, arg3 - @w[pid, arg0, arg1], @w[pid, arg0, arg1]);
    delete(@w[pid, arg0, arg1]); }
uprobe:LIB:spa_sync { @s[tid] = nsecs; @t[tid] = arg1; }
uretprobe:LIB:spa_sync /@s[tid]/ {
    printf("R %d %llu %llu %llu\n", pid, @s[tid], nsecs - @s[tid], @t[tid]); delete(@s[tid]); delete(@t[tid]); }
END { clear(@w); clear(@s); clear(@t); }
"""


def txg_truth(tmp):
    return truth_running(tmp, TRUTH, libzpool().path)


@pytest.fixture(scope="module")
@lab_run
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lab")
    cap = tmp / "x.cap"
    with txg_truth(tmp):
        # until the capture holds what the checks need (ztest's pace varies with the machine's load;
        # a fixed 20 s once gave fewer than 100 txgs in CI), within a bound
        proc = subprocess.Popen(ZFSOBS + ["record", "--lab", "-O", str(cap)], stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 300
            while not enough(txg_rows_in(cap)):
                still_running(proc)
                assert time.time() < deadline, "too slow"
                time.sleep(1)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    ztest_lived(err)
    assert proc.returncode == 0, err
    stime, ret = {}, {}
    for line in (tmp / "truth.out").read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["S"]:
            # (stime, WAIT_FOR_SYNC time): the latter tells apart two incarnations of a pool in one
            # ztest process that reach the same txg numbers
            stime.setdefault((int(parts[1]), parts[2], int(parts[3])), []).append((int(parts[4]), int(parts[5])))
        elif parts[:1] == ["R"]:
            ret[(int(parts[1]), int(parts[2]))] = int(parts[3])
    parser = Parser()
    events = [ev for ev in map(parser.parse, read_capture(str(cap)).lines) if ev]
    return {"cap": cap, "events": events, "parser": parser, "stime": stime, "ret": ret,
            "stderr": err, "tmp": tmp}


MIN_TXGS, MIN_BIG = 110, 12


def enough(rows: list[dict]) -> bool:
    """The checks' amounts: 100 txgs, 10 of them syncing for 1 ms or more (with margin)."""
    return len(rows) >= MIN_TXGS and sum(r.get("stime_ns", 0) >= 1_000_000 for r in rows) >= MIN_BIG


def txgs(run):
    return [ev.fields for ev in run["events"] if ev.kind == "txg"]


def agree(ours: int, truth: int, floor_ns: int) -> bool:
    """Within 5 %, or within a fixed floor for syncs so short that a fixed cost is 5 % of them."""
    return abs(ours - truth) <= max(0.05 * truth, floor_ns)


# stime also spans the vdev_get_stats() of the root vdev that spa_txg_history_fini_io() makes
# after spa_sync (measured here: 40 us median, 120 us max with ~70 file vdevs, and a few ms when it
# waits for a config lock that ztest's vdev add/remove holds); a second uretprobe differs from
# ours only by the order of two uprobe traps, so it is the exact check.
STIME_FLOOR_NS = 200_000
URETPROBE_FLOOR_NS = 20_000


def test_records_at_least_100_txgs_with_positive_sync_times(run):
    rows = txgs(run)
    assert len(rows) >= 100, run["stderr"]
    assert all(r["sync_ns"] > 0 for r in rows)
    assert run["parser"].malformed == 0
    pools = {r["pool"] for r in rows}
    # the lab's pool, and the pools ztest derives from its name (e.g. <pool>_upgrade) only
    main = min(pools, key=len)
    assert main.startswith("zfsobs_lab_") and all(p.startswith(main) for p in pools), f"other pools kept: {pools}"


def test_each_sync_time_agrees_with_zfs_own_stime(run):
    rows, stime = txgs(run), run["stime"]
    checked, agreeing, big = 0, 0, 0
    for r in rows:
        # the sync this row measured began right after its WAIT_FOR_SYNC time
        candidates = [(s, w) for s, w in stime.get((r["pid"], r["pool"], r["txg"]), [])
                      if 0 <= r["start"] - w < 10_000_000]
        if not candidates:
            continue
        truth = min(candidates, key=lambda sw: r["start"] - sw[1])[0]
        assert r["stime_ns"] == truth                   # our copy of the same ZFS field
        assert truth >= r["sync_ns"] - URETPROBE_FLOOR_NS, (r, truth)   # stime contains spa_sync
        checked += 1
        agreeing += agree(r["sync_ns"], truth, STIME_FLOOR_NS)
        big += truth >= 1_000_000
    assert checked >= 0.95 * len(rows) and big >= 10, (checked, big, len(rows))
    # most: a sync whose stime also waited outside spa_sync (the config lock, a preempted sync
    # thread on a loaded machine) differs by that wait, which the containment above bounds
    assert agreeing >= 0.75 * checked, (agreeing, checked)


def test_each_sync_time_agrees_with_a_second_uretprobe(run):
    rows, ret = txgs(run), run["ret"]
    matched, off = 0, []
    for r in rows:
        truth = ret.get((r["pid"], r["start"]))
        if truth is None:   # the other program's entry timestamp differs by the trap order
            near = [v for (pid, s), v in ret.items() if pid == r["pid"] and abs(s - r["start"]) < 50_000]
            truth = near[0] if len(near) == 1 else None
        if truth is None:
            continue
        if not agree(r["sync_ns"], truth, URETPROBE_FLOOR_NS):
            off.append((r, truth))
        matched += 1
    # the second program's own uretprobe loses returns under load on kernel 6.18 (CI: 584 of 735
    # matched): it must see most txgs. The two return handlers run one after the other in one trap,
    # and the task can be preempted between them: with both cores busy (stress-ng --cpu 2, the 2.3
    # lab's same check, 4 runs, 1046 syncs) 1 sync was off by more than the floor. So 99 % agree.
    assert matched >= 0.7 * len(rows), (matched, len(rows))
    assert len(off) <= 0.01 * matched, off[:5]


def test_intervals_and_dirty_are_consistent(run):
    rows = txgs(run)
    by_pid = {}
    for r in rows:
        prev = by_pid.get((r["pid"], r["pool"]))     # ztest may run a second pool (<pool>_upgrade)
        if prev is not None and r["txg"] > prev["txg"] and r.get("interval_ns") is not None:
            assert r["interval_ns"] == r["start"] - prev["start"]
        by_pid[(r["pid"], r["pool"])] = r
    dirty = [r["dirty"] for r in rows if r.get("dirty") is not None]
    assert len(dirty) == len(rows) and max(dirty) > 0     # ztest dirties data in most txgs
    assert all(d >= 0 for d in dirty)


def test_report_and_replay_read_the_capture(run):
    cap = str(run["cap"])
    res = subprocess.run(ZFSOBS + ["report", cap, "--format", "json"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert len(data["txgs"]) == len(txgs(run)) and all(t["sync_ns"] > 0 for t in data["txgs"])
    assert data["meta"]["trailer"]["reason"] == "terminated (SIGTERM)"
    res = subprocess.run(ZFSOBS + ["replay", cap], capture_output=True, text=True)   # not a tty: line mode
    assert res.returncode == 0, res.stderr
    body = res.stdout.splitlines()
    assert body[0].split()[:3] == ["time", "pool", "txg"] and len(body) == len(txgs(run)) + 1
    assert os.stat(cap).st_mode & 0o777 == 0o600


def test_lab_files_are_removed(run):
    lab_dirs = [d for d in os.listdir("/dev/shm") if d.startswith("zfsobs-lab-")]
    meta = read_capture(str(run["cap"])).meta
    assert os.path.basename(meta["lab"]["dir"]) not in lab_dirs


LAG_NS = 5_000_000_000


def test_a_capture_killed_with_sigkill_stays_readable(tmp_path):
    cap = tmp_path / "killed.cap"
    with txg_truth(tmp_path):
        proc = subprocess.Popen(ZFSOBS + ["record", "--lab", "-O", str(cap)], stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 300
        while len(txg_rows_in(cap)) < 20:      # txgs are being written
            assert proc.poll() is None and time.time() < deadline, "no txgs recorded"
            time.sleep(1)
        time.sleep(LAG_NS / 1e9 + 3)           # those are due by the kill
        killed_at = time.monotonic_ns()
        proc.kill()
        proc.wait()
    captured = read_capture(str(cap))
    assert captured.trailer is None and any("did not end cleanly" in w for w in captured.warnings)
    events = [ev for ev in map(Parser().parse, captured.lines) if ev]
    rows = [ev for ev in events if ev.kind == "txg"]
    assert rows, "nothing readable after SIGKILL"
    # every txg of the lab that the independent probe saw end more than LAG_NS before the kill is
    # in the capture: one 1 s flush interval, and up to 4 s more that a loaded machine can keep
    # zfsobs from reading and writing (a run with load ~10 on 2 cores missed the 1.5 s once). A
    # txg is its (pid, txg) and the nearest start: two probes on one entry differ by preemption
    # between them (up to 132 us measured under load: docs/testing.md), a re-import by seconds.
    ours = {}
    for ev in rows:
        ours.setdefault((ev.fields["pid"], ev.fields["txg"]), []).append(ev.fields["start"])
    lab_pids = {pid for pid, _ in ours}
    seen = [tuple(map(int, p[1:5])) for p in map(str.split, (tmp_path / "truth.out").read_text().splitlines())
            if p[:1] == ["R"] and int(p[1]) in lab_pids]
    due = [(pid, txg, start) for pid, start, dur, txg in seen if start + dur < killed_at - LAG_NS]
    missing = [k for k in due if not any(abs(k[2] - s) < 20_000_000 for s in ours.get(k[:2], ()))]
    assert due and not missing, (len(due), missing[:5])
    # bpftrace and the lab's ztest die with zfsobs (PR_SET_PDEATHSIG; SIGKILL for bpftrace: CI saw a
    # SIGTERM lost by bpftrace 0.17 leave it running past this deadline); the kernel detaches their
    # probes as their last file descriptors close (seconds on a loaded machine)
    deadline = time.time() + 60
    while True:
        ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
        perf = subprocess.run(["bpftool", "perf", "list"], capture_output=True, text=True).stdout
        # the lab's ztest (its pass child has no arguments and ends with its pass, see docs/lab.md)
        left_behind = ("zfsobs-probes-" in ps or libzpool().path in perf
                       or [l for l in ps.splitlines() if f"-p zfsobs_lab_{proc.pid}" in l])
        if not left_behind or time.time() > deadline:
            break
        time.sleep(1)
    assert not left_behind, ([l for l in ps.splitlines() if "bpftrace" in l or "ztest" in l], perf)
    # the lab's watchdog outlives the SIGKILL: it stopped the pass process ztest forked (no
    # parent-death signal reaches it) and removed the lab's files (tests/test_lab_sigkill.py)
    left = captured.meta["lab"]["dir"]
    assert not os.path.exists(left)
    assert not scan(lambda pid: holds(pid, (left + os.sep,)))
