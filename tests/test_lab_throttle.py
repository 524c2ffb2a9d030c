"""The write throttle per txg on real OpenZFS (probes/linux/throttle.bt): a lab run with a small
zfs_dirty_data_max, so ztest's writers are throttled.

Ground truth: the library's OWN counters, the dmu_tx kstat (dmu_tx_stats: dmu_tx_dirty_delay and
dmu_tx_wrlog_delay, bumped by dmu_tx_try_assign() as it marks a transaction to wait for dirty
space), read by an independent bpftrace at every spa_sync and vdev_free of each process (at
its export, after its last sync). The transactions the probe counts as delayed, summed over a
process's txgs, equal them exactly."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict

import pytest

from conftest import lab_ready, lab_run, truth_running, ztest_lived
from zfsobs.capture import read_capture
from zfsobs.events import Parser, parse_all
from zfsobs.targets.target import libzpool

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ok")]

ZFSOBS = [sys.executable, "-m", "zfsobs"]
DIRTY_MAX = 4 << 20
# kstat_named_t in libspl: a 255-byte name, a type byte, the value 8-aligned: 272 bytes, value at
# +256 (dmu_tx_assign's atomic_add_64 of dmu_tx_stats + 0x100, 0x320, 0x430, 0x540: entries 0, 2, 3, 4)
ENTRY, VALUE = 272, 256
DIRTY_DELAY, OVER_MAX, WRLOG_DELAY = 8, 9, 11        # struct dmu_tx_stats, 2.1 to 2.3
TRUTH = r"""
uprobe:LIB:spa_sync { $s = reg("ip") - SYNC + STATS;
    @dd[pid] = max(*(uint64 *)($s + DD)); @wl[pid] = max(*(uint64 *)($s + WL)); @om[pid] = max(*(uint64 *)($s + OM)); }
uprobe:LIB:vdev_free { $s = reg("ip") - FREE + STATS;
    @dd[pid] = max(*(uint64 *)($s + DD)); @wl[pid] = max(*(uint64 *)($s + WL)); @om[pid] = max(*(uint64 *)($s + OM)); }
"""
TRUTH_RE = re.compile(r"^@(\w+)\[(\d+)\]: (\d+)$")


def symbols(lib: str) -> dict[str, int]:
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    return {parts[2]: int(parts[0], 16) for parts in map(str.split, out.splitlines()) if len(parts) == 3}


@pytest.fixture(scope="module")
@lab_run
def run(tmp_path_factory):
    lib = libzpool()
    sym = symbols(lib.path)
    script = TRUTH
    for name, value in (("SYNC", sym["spa_sync"]), ("FREE", sym["vdev_free"]), ("STATS", sym["dmu_tx_stats"]),
                        ("DD", DIRTY_DELAY * ENTRY + VALUE), ("WL", WRLOG_DELAY * ENTRY + VALUE),
                        ("OM", OVER_MAX * ENTRY + VALUE)):
        script = script.replace(name, str(value))
    tmp = tmp_path_factory.mktemp("throttle")
    cap = tmp / "throttle.cap"
    with truth_running(tmp, script, lib.path):
        res = subprocess.run(ZFSOBS + ["record", "--lab", "--lab-time", "20", "--option",
                                       f"zfs_dirty_data_max={DIRTY_MAX}", "-O", str(cap)],
                             capture_output=True, text=True, timeout=600)
    ztest_lived(res.stderr)
    assert res.returncode == 0, res.stderr[-2000:]
    truth: dict[int, dict] = defaultdict(dict)
    for line in (tmp / "truth.out").read_text().splitlines():
        if m := TRUTH_RE.match(line):
            truth[int(m[2])][m[1]] = int(m[3])
    report = subprocess.run(ZFSOBS + ["report", str(cap), "--format", "json"], capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    text = subprocess.run(ZFSOBS + ["report", str(cap)], capture_output=True, text=True).stdout
    metrics = subprocess.run(ZFSOBS + ["report", str(cap), "--format", "openmetrics"], capture_output=True,
                             text=True).stdout
    events = list(parse_all(read_capture(str(cap)).lines, Parser()))
    return {"events": events, "truth": truth, "report": json.loads(report.stdout), "text": text, "metrics": metrics}


def lines(run):
    return [ev.fields for ev in run["events"] if ev.kind == "txg_thr"]


def test_delayed_transactions_equal_the_librarys_own_count(run):
    ours = defaultdict(int)
    for f in lines(run):
        ours[f["pid"]] += f["delays"]
    truth = {pid: t.get("dd", 0) + t.get("wl", 0) for pid, t in run["truth"].items()}
    assert sum(truth.values()) >= 100, f"the lab was hardly throttled: {truth}"
    # every process the probe saw, and every process the truth saw throttled
    for pid in set(ours) | {p for p, n in truth.items() if n}:
        assert ours.get(pid, 0) == truth.get(pid), (pid, ours.get(pid), run["truth"].get(pid))


def test_each_txg_line_is_consistent(run):
    seen = lines(run)
    assert seen and any(f["delays"] for f in seen)
    waited, delays = defaultdict(int), defaultdict(int)
    for f in seen:
        # the buckets hold throttled waits, each in the txg open as it ended; a transaction
        # refused throttled counts as that happens, and its caller may give up (a delay with no
        # wait: ztest_dmu_commit_callbacks) or wait (in a later txg, maybe)
        n = sum(f[f"d{i}"] for i in range(6))
        waited[f["pid"]] += n
        delays[f["pid"]] += f["delays"]
        assert (n == 0) == (f["delay_ns"] == 0) and f["delay_max_ns"] <= f["delay_ns"], f
        assert f["dirty_data_max"] == DIRTY_MAX and f["delay_min_pct"] == 60 and f["delay_scale"] > 0, f
    assert all(waited[pid] <= delays[pid] for pid in delays) and sum(waited.values()) > 0, (waited, delays)
    # the throttle delays a transaction only past 60% of the max: some txg saw that much dirty data
    assert max(f["dirty_max"] for f in seen) > DIRTY_MAX * 0.6


def test_the_report_carries_the_throttle_per_txg_and_per_pool(run):
    rows = run["report"]["txgs"]
    assert rows and all(isinstance(r["delay_count"], int) and isinstance(r["delay_ns"], int) for r in rows)
    by_txg = defaultdict(list)        # one process can sync a txg number twice (ztest makes its pool again)
    for r in rows:
        by_txg[(r["pid"], r["txg"])].append(r)
    joined = 0
    for ev in run["events"]:
        if ev.kind == "txg_thr":
            f = ev.fields
            row = [r for r in by_txg[(f["pid"], f["txg"])] if abs(r["start_ns"] - ev.ts) < 10**9]
            if row:         # stamped at the same spa_sync entry
                assert (row[0]["delay_count"], row[0]["delay_ns"]) == (f["delays"], f["delay_ns"]), (row, f)
                joined += 1
    assert joined >= len(lines(run)) * 0.9, (joined, len(lines(run)))
    for pool, st in run["report"]["summary"]["txg"].items():
        th = st["throttle"]
        assert th["delay_count"] == sum(r["delay_count"] for r in rows if r["pool"] == pool), (pool, th)
    assert any(st["throttle"]["txgs_delayed"] for st in run["report"]["summary"]["txg"].values())
    assert "write throttle" in run["text"]


def test_the_openmetrics_export_carries_the_same_totals(run):
    """The exporter's families, from the same model: the delayed-transaction counter's last sample
    per pool is the capture's sum (prometheus_client wrote the text)."""
    last = {}
    for line in run["metrics"].splitlines():
        if m := re.match(r'^zfsobs_write_throttle_delayed_transactions_total\{.*zpool="([^"]+)".*\} (\S+) ', line):
            last[m[1]] = float(m[2])
    sums = defaultdict(int)
    for f in lines(run):
        sums[f["pool"]] += f["delays"]
    assert last and last == {p: float(n) for p, n in sums.items()}, (last, dict(sums))

