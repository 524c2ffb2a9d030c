"""Two bpftrace releases trace one lab at the same time and must agree exactly (issue 20): Debian 12's
0.17 (the host's) and sid's 0.27.1 (scripts/bpftrace-chroot; ZFSOBS_SIDE_BY_SIDE=trixie for 0.23.2),
each in its own `zfsobs record --target libzpool:COPY`, both attached before ztest starts and stopped
after it has ended by itself (every txg syncs and every commit completes inside the run). Their
captures are compared through the report's JSON and the model: the same txg rows, ZIL totals per
txg (but for an event at the instant its txg closes: boundary_moves), vdev queue counts and
vdev_cache counts. The lab runs on a private copy of libzpool (uprobes
are per inode: no other run's probes see it)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict

import pytest

from conftest import lab_ready, lab_run, load_capture, ztest_lived
from test_lab_bpftrace_versions import VERSIONS, bpftrace_for, private_library
from zfsobs.capture import read_capture
from zfsobs.events import Parser
from zfsobs.labs.userland import ZTEST, Build, Lab
from zfsobs.model.vdev_cache import COUNTERS as VC_COUNTERS

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ok")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# release -> the suite whose chroot has it (None: the host's)
PAIR = dict(VERSIONS[s] for s in ("bookworm", os.environ.get("ZFSOBS_SIDE_BY_SIDE") or "sid"))
# ztest ends by itself after LAB_TIME s; another run follows while the first recorder holds fewer
# than MIN_TXGS syncs or MIN_COMMITS ZIL commits, at most MAX_LABS runs (measured on 2 busy cores,
# 9 recordings: one run gave 171-325 syncs, and 20 or more commits in 8 of them; a run takes 60-90 s)
LAB_TIME, MIN_TXGS, MIN_COMMITS, MAX_LABS = 8, 100, 10, 4
# the ZIL workload (one dataset, 16 KiB log blocks) with the vdev_cache on: hits and fills to compare
OPTIONS = ["zfs_vdev_cache_size=10485760"]
# The skew between the two releases' timestamps of one txg. Their probes on one uprobe trap run one
# after the other, in the order the consumers were attached (which recorder's bpftrace came first:
# one sign for a whole run), with whatever else is attached there in between: the other recorder's
# zil probe, whose spa_sync entry prints that txg's per-CPU ZIL lines (a txg with ZIL lines: tens
# of us more). And the task can be preempted in between. Measured with 0.17 and 0.27.1 on 2 busy
# cores (a CI suite running beside them), 4 runs, 992 syncs: start skew p50 4.9 us, p90 71 us,
# p99 138 us, max 200 us (<= 10 us in the 2 runs whose order put no zil flush in between; up to
# 200 us in txgs with ZIL lines and <= 36 us in those without, in the 2 that did); sync time skew
# p50 2.4 us, p90 15 us, p99 65 us, max 185 us. ZFS's own state times (stime, wait) are equal.
SKEW_NS = 500_000         # 99 % of txgs: start and sync time within this of the other release's
SKEW_SHARE = 0.99
SKEW_MAX_NS = 20_000_000  # every txg: no preemption reaches this
VQ_COUNTS = ("enq", "enq_bytes", "issued", "merged", "aggs", "done", "done_bytes", "untracked",
             "untracked_act", "unseen")
ZIL_COUNTS = ("commits", "itxs", "itx_bytes", "lwbs", "nused", "size", "writes", "write_bytes",
              "lwb_le4k", "lwb_4to32k", "lwb_ge32k")


# Exact agreement needs every event in both: 4 MiB of perf buffer per CPU (bpftrace's default is
# 256 KiB). With the default, 1 of 10 runs here (nice 19, beside a CI suite) lost 7 vdev_queue events
# in the 0.27.1 recorder. Lost events are tested on their own (test_lab_faults, the lossy sid run).
RB_PAGES = "1024"


def recorder(tmp, release: str, bpftrace: str, library: str) -> subprocess.Popen:
    cap = tmp / f"{release}.cap"
    env = dict(os.environ, ZFSOBS_BPFTRACE=bpftrace, BPFTRACE_PERF_RB_PAGES=RB_PAGES)
    return subprocess.Popen([sys.executable, "-m", "zfsobs", "record", "--target", f"libzpool:{library}",
                             "-O", str(cap)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def counted(cap) -> tuple[int, int]:
    """(txg events, ZIL commits on final lines) in a capture being written."""
    if not os.path.exists(cap) or os.path.getsize(cap) < 1000:
        return 0, 0
    parser, txgs, commits = Parser(), 0, 0
    for ev in map(parser.parse, read_capture(str(cap)).lines):
        if ev and ev.kind == "txg":
            txgs += 1
        elif ev and ev.kind == "zil" and ev.fields.get("final"):
            commits += ev.fields.get("commits") or 0
    return txgs, commits


def run_lab(libdir: str, library: str) -> None:
    """One lab run on the private copy that ends by itself (ztest -T LAB_TIME)."""
    lab = Lab(duration=LAB_TIME, options=OPTIONS, library=library, preset="zil")
    lab.build = Build(ZTEST, libdir)      # ztest loads libzpool.so.5 from LD_LIBRARY_PATH: the copy
    try:
        lab.start()
        lab.proc.wait(timeout=LAB_TIME + 240)
        ztest_lived(lab.failure())
    finally:
        lab.stop()


def stopped(proc: subprocess.Popen) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:      # its bpftraces die with it (PR_SET_PDEATHSIG)
        proc.kill()
        return proc.communicate()


@pytest.fixture(scope="module")
@lab_run
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("side-by-side")
    libdir = private_library(tmp)
    library = os.path.realpath(os.path.join(libdir, "libzpool.so.5"))
    tracers = {release: bpftrace_for(suite) for release, suite in PAIR.items()}
    procs = {release: recorder(tmp, release, bpftrace, library) for release, bpftrace in tracers.items()}
    first = tmp / f"{next(iter(PAIR))}.cap"
    labs, began, attached, counts = 0, time.time(), 0.0, []
    try:
        deadline = time.time() + 300        # a capture exists once all of its probes attached
        while not all((tmp / f"{r}.cap").exists() for r in PAIR):
            assert all(p.poll() is None for p in procs.values()) and time.time() < deadline, \
                {r: p.poll() for r, p in procs.items()}
            time.sleep(0.2)
        attached = time.time() - began
        while labs < MAX_LABS:
            run_lab(libdir, library)
            labs += 1
            time.sleep(1.5)                 # the capture is flushed every second
            txgs, commits = counted(first)
            counts.append((txgs, commits))
            if txgs >= MIN_TXGS and commits >= MIN_COMMITS:
                break
        time.sleep(1.0)                     # the probes' last dumps (a freed vdev's final lines)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        outcome = {release: stopped(proc) for release, proc in procs.items()}
    print(f"side by side: {PAIR}: attached after {attached:.1f} s, {labs} lab run(s) (txgs, commits so "
          f"far: {counts}), stopped after {time.time() - began:.1f} s")
    out = {"labs": labs}
    for release, proc in procs.items():
        assert proc.returncode == 0, outcome[release][1][-3000:]
        cap = tmp / f"{release}.cap"
        report = subprocess.run([sys.executable, "-m", "zfsobs", "report", str(cap), "--format", "json"],
                                capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert report.returncode == 0, report.stderr[-2000:]
        capture, model, _ = load_capture(cap, "txg")
        out[release] = {"report": json.loads(report.stdout), "model": model, "trailer": capture.trailer,
                        "meta": capture.meta}
    return out


def both(runs):
    a, b = PAIR
    return runs[a], runs[b]


def test_both_releases_ran_the_whole_lab(runs):
    for release in PAIR:
        run = runs[release]
        assert run["meta"]["bpftrace"].lstrip("v").startswith(release + "."), run["meta"]["bpftrace"]
        assert not run["meta"]["unavailable"], run["meta"]["unavailable"]
        assert run["trailer"]["reason"] == "interrupted (SIGINT)", run["trailer"]
        assert run["trailer"]["lost"] == 0 and run["trailer"]["malformed"] == 0, run["trailer"]
    a, _ = both(runs)
    assert len(a["report"]["txgs"]) >= MIN_TXGS, (runs["labs"], len(a["report"]["txgs"]))
    assert sum(z["commits"] for z in a["report"]["zil"] if z["final"]) >= MIN_COMMITS


def paired_txgs(runs) -> list[tuple[dict, dict]]:
    """Each txg row of one release with the other's of the same (pid, pool, txg); a pool imported
    again repeats its txg numbers, so rows of one key pair in start order."""
    keyed = []
    for run in both(runs):
        rows = defaultdict(list)
        for r in run["report"]["txgs"]:
            rows[(r["pid"], r["pool"], r["txg"])].append(r)
        keyed.append(rows)
    a, b = keyed
    assert Counter({k: len(v) for k, v in a.items()}) == Counter({k: len(v) for k, v in b.items()})
    return [(x, y) for k in a for x, y in zip(sorted(a[k], key=lambda r: r["start_ns"]),
                                              sorted(b[k], key=lambda r: r["start_ns"]))]


def skews(pairs) -> dict[str, list[int]]:
    out = {}
    for name in ("start_ns", "sync_ns", "stime_ns", "wait_ns"):
        assert all((x[name] is None) == (y[name] is None) for x, y in pairs), name
        out[name] = sorted(abs(x[name] - y[name]) for x, y in pairs if x[name] is not None)
    return out


def test_the_same_txg_rows_with_sync_times_within_the_skew(runs):
    pairs = paired_txgs(runs)
    assert len(pairs) >= MIN_TXGS
    print(f"txg: {len(pairs)} rows in both, the same (pid, pool, txg) and dirty bytes")
    assert all(x["dirty_bytes"] == y["dirty_bytes"] for x, y in pairs)
    for name, values in skews(pairs).items():
        n = len(values)
        print(f"{name} skew over {n} txgs: p50 {values[n // 2]} p99 {values[int(n * 0.99)]} "
              f"max {values[-1]} ns")
        if name in ("start_ns", "sync_ns"):
            assert values[int(n * SKEW_SHARE)] <= SKEW_NS and values[-1] <= SKEW_MAX_NS, (name, values[-10:])
        else:       # ZFS's own timestamps, read from the same memory
            assert values[-1] == 0, (name, values[-10:])


def boundary_moves(a: dict[int, int], b: dict[int, int]) -> int:
    """How much of one ZIL counter the two releases put in adjacent txgs. The probes count an event
    to the txg open at its trap (tx_open_txg, read by each probe), and another CPU's txg_quiesce can
    open the next txg between the two releases' probes on that trap: the probe that ran first counts
    it in txg t, the other in t+1. Allowed: the same total, and every difference such a move, all in
    one direction (on one function's trap one release's probe runs first for the whole run)."""
    gap, gaps = 0, []
    for t in sorted(set(a) | set(b)):
        gap += a.get(t, 0) - b.get(t, 0)
        gaps.append((t, gap))
    assert gap == 0 and (all(g >= 0 for _, g in gaps) or all(g <= 0 for _, g in gaps)), gaps
    for t, g in gaps:        # what one counted up to t and the other later, it counted in t and the other in t + 1
        first, second = (a, b) if g > 0 else (b, a)
        assert abs(g) <= min(first.get(t, 0), second.get(t + 1, 0)), (t, g, gaps)
    return sum(abs(g) for _, g in gaps)


def test_the_same_zil_totals_per_txg(runs):
    per_release = []
    for run in both(runs):
        rows = defaultdict(Counter)        # (pid, pool, counter) -> txg -> value
        for z in run["report"]["zil"]:
            if z["final"]:
                for name in ZIL_COUNTS:
                    rows[(z["pid"], z["pool"], name)][z["txg"]] += z[name]
        per_release.append(rows)
    a, b = per_release
    assert set(a) == set(b)
    totals, moved = Counter(), Counter()
    for key in a:
        totals[key[2]] += sum(a[key].values())
        moved[key[2]] += boundary_moves(a[key], b[key])
    for name in ("commits", "itxs", "writes", "lwbs"):     # events (the others are their bytes and bins)
        assert moved[name] <= 2 + 0.01 * totals[name], (name, moved[name], totals[name])
    assert totals["lwbs"] > 0 and totals["commits"] > 0
    txgs = {k[:2] + (t,) for k, v in a.items() for t in v if v[t]}
    same = sum(1 for pid, pool, t in txgs if all(a[(pid, pool, n)][t] == b[(pid, pool, n)][t] for n in ZIL_COUNTS))
    print(f"zil: {same} of {len(txgs)} txgs with ZIL lines equal in both;",
          ", ".join(f"{n} {totals[n]}" for n in ("commits", "itxs", "lwbs", "nused", "size")),
          "equal per process and pool;", ", ".join(f"{n} {moved[n]}" for n in ("commits", "itxs", "lwbs")),
          "counted one txg apart")


def finals(model_rows):
    """Counts per key, of the keys whose every incarnation ended with a final line."""
    sums, done = defaultdict(Counter), defaultdict(lambda: True)
    for key, final, counts in model_rows:
        sums[key].update(counts)
        done[key] &= final
    return {k: v for k, v in sums.items() if done[k]}


def test_the_same_vdev_queue_counts_where_both_saw_final_lines(runs):
    per_release = []
    for run in both(runs):
        vq = run["model"].vq
        per_release.append(finals(((s.pid, vq.vdev(s).path, s.cls), s.final and vq.vdev(s).final,
                                    {c: out[c] for c in VQ_COUNTS}) for _, s, out in vq.totals()))
    a, b = per_release
    common = set(a) & set(b)
    assert len(common) >= 0.9 * max(len(a), len(b)) and sum(a[k]["done"] for k in common) > 0
    assert {k: a[k] for k in common} == {k: b[k] for k in common}
    print(f"vdev queue: {len(common)} (pid, path, class) final in both ({len(a)} and {len(b)} final in each), "
          f"{sum(a[k]['done'] for k in common)} I/Os done, {sum(a[k]['enq'] for k in common)} queued")


def test_the_same_vdev_cache_counts(runs):
    per_release = []
    for run in both(runs):
        per_release.append(finals(((v.pid, v.path), v.final, {c: t[c] for c in VC_COUNTERS})
                                  for v, t in run["model"].vc.rows()))
    a, b = per_release
    common = set(a) & set(b)
    assert len(common) >= 0.9 * max(len(a), len(b))
    assert {k: a[k] for k in common} == {k: b[k] for k in common}
    total = sum((a[k] for k in common), Counter())
    assert total["hits"] > 0 and total["misses"] > 0, total
    print(f"vdev_cache: {len(common)} (pid, path) final in both ({len(a)} and {len(b)} final in each):",
          ", ".join(f"{n} {total[n]}" for n in ("reads", "hits", "misses", "fill_bytes", "declined")))
