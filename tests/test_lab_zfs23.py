"""The OpenZFS 2.3 lab end to end: `zfsobs record --lab --zfs 2.3` runs bookworm-backports' ztest
2.3.2 on its own libzpool (scripts/setup's private copy), and an independent bpftrace on that
library is the ground truth for every txg. Each other probe works there or says why not."""
from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from collections import Counter, defaultdict

import pytest

from conftest import lab_ready, lab_run, truth_running, ztest_lived
from zfsobs.targets import render as probes
from zfsobs.capture import read_capture
from zfsobs.events import Parser
from zfsobs.labs.userland import BUILDS, LAB_OPTIONS
from zfsobs.sources.bpftrace import DEFAULT_PROBES

ZFS23 = BUILDS["2.3"]


def lab23_ready() -> str:
    if lab_ready():
        return lab_ready()
    if not os.path.exists(ZFS23.ztest):
        return f"needs the OpenZFS 2.3 lab ({ZFS23.ztest}): run ./scripts/setup"
    return ""


pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab23_ready()), reason=lab23_ready() or "ok")]

ZFSOBS = [sys.executable, "-m", "zfsobs"]
LAB_TIME = 5        # ztest's run; its pool creation and freeze test add a few seconds around it
# ztest -o reaches the library through the lab's libzpool.so symlink (docs/lab.md): 2 shows in act_max
TUNABLE = "zfs_vdev_async_write_max_active=2"
# Ground truth, written without txg.bt: every spa_sync entry/return, and ZFS's own dirty count of
# the txg (the txgs kstat's ndirty), which spa_txg_history_init_io stores in the txg_stat_t it
# returns: txg at +0x300 and ndirty at +0x308 in 2.3.2 (its disassembly: movups %xmm0,0x300(ts)).
TRUTH = r"""
uprobe:LIB:spa_sync { @s[tid] = nsecs; @p[tid] = arg0; @t[tid] = arg1; }
uretprobe:LIB:spa_sync /@s[tid]/ {
    printf("R %d %s %llu %llu %llu\n", pid, str(@p[tid]), @t[tid], @s[tid], nsecs - @s[tid]);
    delete(@s[tid]); delete(@p[tid]); delete(@t[tid]); }
uprobe:LIB:spa_txg_history_init_io { @i[tid] = arg0; }
uretprobe:LIB:spa_txg_history_init_io /@i[tid]/ {
    printf("D %d %s %llu %llu\n", pid, str(@i[tid]), *(uint64 *)(retval + 0x300), *(uint64 *)(retval + 0x308));
    delete(@i[tid]); }
END { clear(@s); clear(@p); clear(@t); clear(@i); }
"""


MIN_SYNCS = 50


@pytest.fixture(scope="module")
@lab_run
def run(tmp_path_factory):
    """A lab run with at least MIN_SYNCS syncs of its pools, by construction: ztest runs LAB_TIME
    seconds, and a run that synced fewer (a busy machine slows ztest) is done again, longer."""
    for lab_time in (LAB_TIME, 3 * LAB_TIME, 9 * LAB_TIME):
        result = _record(tmp_path_factory.mktemp("lab23"), lab_time)
        if len(result["syncs"]) >= MIN_SYNCS:
            return result
    return result


def _record(tmp, lab_time: int) -> dict:
    cap = tmp / "x.cap"
    library = os.path.realpath(os.path.join(ZFS23.libdir, "libzpool.so.6"))
    with truth_running(tmp, TRUTH, library):
        res = subprocess.run(ZFSOBS + ["record", "--lab", "--zfs", "2.3", "--lab-time", str(lab_time),
                                       "--option", TUNABLE, "-O", str(cap)], capture_output=True, text=True, timeout=600)
    ztest_lived(res.stderr)
    assert res.returncode == 0, res.stderr
    captured = read_capture(str(cap))
    pool = captured.meta["lab"]["pool"]
    syncs, dirty = [], defaultdict(list)
    for parts in map(str.split, (tmp / "truth.out").read_text().splitlines()):
        if parts[:1] == ["R"] and parts[2].startswith(pool):     # only this lab's pools
            syncs.append((int(parts[1]), parts[2], int(parts[3]), int(parts[4]), int(parts[5])))
        elif parts[:1] == ["D"] and parts[2].startswith(pool):
            dirty[(int(parts[1]), parts[2], int(parts[3]))].append(int(parts[4]))
    parser = Parser()
    events = [ev for ev in map(parser.parse, captured.lines) if ev]
    return {"meta": captured.meta, "trailer": captured.trailer, "capture": captured, "events": events, "parser": parser, "syncs": syncs, "dirty": dirty,
            "stderr": res.stderr}


def txgs(run):
    return [ev.fields for ev in run["events"] if ev.kind == "txg"]


def test_runs_the_23_build_and_says_so(run):
    meta = run["meta"]
    assert meta["target"]["zfs_version"] == "2.3.2"
    assert meta["target"]["path"].startswith(os.path.realpath(ZFS23.libdir) + "/")
    lab = meta["lab"]
    assert (lab["zfs"], lab["zfs_version"], lab["ztest"]) == ("2.3", "2.3.2", ZFS23.ztest)
    lab_own = {name: int(value) for name, _, value in (o.partition("=") for o in LAB_OPTIONS)}
    assert meta["tunables"] == {**lab_own, "zfs_vdev_async_write_max_active": 2}
    assert run["trailer"]["reason"] == "the lab's ztest run ended", run["stderr"]
    assert run["parser"].malformed == 0


def test_every_sync_is_one_txg_event_with_its_time(run):
    rows, syncs = txgs(run), run["syncs"]
    assert len(syncs) >= MIN_SYNCS, len(syncs)
    # per process and pool, exactly the spa_sync calls the independent probe saw
    assert Counter((r["pid"], r["pool"]) for r in rows) == Counter((s[0], s[1]) for s in syncs)
    # a pool exported and imported again in one process reaches the same txg numbers: the nearest start
    truth = defaultdict(list)
    for pid, pool, txg, start, ns in syncs:
        truth[(pid, pool, txg)].append((start, ns))
    agreeing, skews = 0, []
    for r in rows:
        start, ns = min(truth[(r["pid"], r["pool"], r["txg"])], key=lambda s: abs(s[0] - r["start"]))
        skews.append(abs(r["start"] - start))
        # 5 %, or 20 us for syncs so short that the order of two uprobe traps is 5 % of them
        agreeing += abs(r["sync_ns"] - ns) <= max(0.05 * ns, 20_000)
    assert agreeing >= 0.95 * len(rows), (agreeing, len(rows))
    # Two probes on one spa_sync entry run one after the other in the same trap, but the task can be
    # preempted between them: with both cores busy (stress-ng --cpu 2, 4 runs, 1046 syncs) p99 8.2 us,
    # max 132 us; in a CI run on a busy host 9 of 504 at 0.1 to 0.25 ms. So: the median within 50 us,
    # and every one within a quarter of the least time between two syncs of one txg number in one
    # process (a pool exported and imported again: seconds), which keeps the nearest-start match sound.
    assert statistics.median(skews) < 50_000, sorted(skews)[-5:]
    starts = [sorted(s for s, _ in v) for v in truth.values()]
    apart = min((b - a for v in starts for a, b in zip(v, v[1:])), default=4_000_000_000)
    assert max(skews) < apart / 4, (sorted(skews)[-5:], apart)


def test_dirty_is_zfs_own_ndirty(run):
    # the 2.3.2 dsl_pool offset (probes/offsets.json) reads what ZFS itself records for the txg
    ours = defaultdict(list)
    for r in txgs(run):
        ours[(r["pid"], r["pool"], r["txg"])].append(r["dirty"])
    assert {k: sorted(v) for k, v in ours.items()} == {k: sorted(v) for k, v in run["dirty"].items()}
    assert max(max(v) for v in ours.values()) > 0


def test_each_other_probe_works_or_says_why_not(run):
    meta, events = run["meta"], run["events"]
    kinds = Counter(ev.kind for ev in events)
    for name in DEFAULT_PROBES:
        if name in meta["unavailable"]:
            assert len(meta["unavailable"][name]) > 20, meta["unavailable"][name]   # a reason
            continue
        assert name in meta["probes"], name
        emitted = set(re.findall(r"zfsobs 1 (\w+) ", probes.source(name))) - {"hello"}
        assert sum(kinds[k] for k in emitted) > 0, (name, emitted, kinds)
    lab_pool = meta["lab"]["pool"]
    zil = [ev.fields for ev in events if ev.kind == "zil"]
    assert sum(z["commits"] for z in zil) > 0 and all(z["pool"].startswith(lab_pool) for z in zil)
    # 2.3.2's vdev_t offsets: every vdev path is one of the lab's file vdevs
    paths = {ev.fields["path"] for ev in events if ev.kind == "vq_vdev"}
    vdevs = os.path.join(meta["lab"]["dir"], "vdevs") + "/"
    assert paths and all(p.startswith(vdevs + lab_pool) for p in paths), paths


def test_a_lab_tunable_reaches_the_23_library(run):
    # act_max holds the library's own active count at every completion; async_write is class 3
    act = [ev.fields["act_max"] for ev in run["events"] if ev.kind == "vq" and ev.fields["class"] == 3]
    assert act and max(act) == 2, Counter(act)


def test_vdev_cache_is_absent_and_every_view_says_so(run, capsys):
    from zfsobs.doctor import report as doctor
    from zfsobs.model import Model
    from zfsobs.views import report
    why = run["meta"]["unavailable"].get("vdev_cache", "")
    assert "removed in OpenZFS 2.2.0" in why, run["meta"]["unavailable"]
    model = Model()
    assert model.vc.state(why) == ("absent", why)
    assert report.as_dict(run["capture"])["summary"]["vdev_cache"]["state"] == "absent"
    assert "vdev_cache: absent: " in report.render(run["capture"], "text")
    from zfsobs.targets.target import libzpool
    rows = [r for r in doctor.checks()[0] if r[1] == "metric vdev_cache on libzpool 2.3.2"]
    assert rows and rows[0][0] == doctor.WARN and "absent:" in rows[0][2], rows
