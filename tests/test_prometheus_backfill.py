"""Backfill: recorded lab captures (real runs, tests/data) -> `zfsobs report --format openmetrics` ->
`promtool tsdb create-blocks-from openmetrics` -> a real Prometheus on those blocks: what PromQL
reads at the capture's end equals `zfsobs report` of the same capture."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict

import pytest

from conftest import DATA
from prom_server import Prometheus, missing

pytestmark = pytest.mark.skipif(bool(missing()), reason=missing() or "ok")

ZFSOBS = [sys.executable, "-m", "zfsobs"]
CAPTURES = {"lab": "lab-2.1.11.cap", "vdev-cache": "vdev-cache-2.1.11.cap"}


def report(path: str) -> dict:
    out = subprocess.run(ZFSOBS + ["report", path, "--format", "json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("backfill")
    blocks = tmp / "data"
    blocks.mkdir()
    ends = {}
    for instance, name in CAPTURES.items():
        om = tmp / f"{instance}.om"
        with open(om, "wb") as f:
            subprocess.run(ZFSOBS + ["report", os.path.join(DATA, name), "--format", "openmetrics",
                                     "--step", "5", "--instance", instance], stdout=f, check=True)
        text = om.read_text()
        assert text.endswith("# EOF\n")
        ends[instance] = max(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if not line.startswith("#"))
        made = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(blocks)],
                              capture_output=True, text=True)
        assert made.returncode == 0, made.stderr[-2000:]
    server = Prometheus(tmp, data=blocks)
    yield server, ends
    server.stop()


def at_end(server, ends, instance, expr):
    return {dict(k).get("zpool", "") if "vdev" not in dict(k) else (dict(k)["zpool"], dict(k)["vdev"], dict(k).get("priority")): v
            for k, v in server.query(expr.replace("INST", instance), ends[instance]).items()}


def test_txg_and_zil_totals_equal_the_report(backfilled):
    server, ends = backfilled
    for instance, name in CAPTURES.items():
        rep = report(os.path.join(DATA, name))
        txgs, sync, fast = Counter(), Counter(), Counter()
        for row in rep["txgs"]:
            txgs[row["pool"]] += 1
            sync[row["pool"]] += row["sync_ns"]
            fast[row["pool"]] += row["sync_ns"] <= 10**7
        assert txgs, f"{name} has no txgs"
        got = at_end(server, ends, instance, 'zfsobs_txg_sync_duration_seconds_count{instance="INST"}')
        assert got == {p: float(n) for p, n in txgs.items()}
        got = at_end(server, ends, instance, 'zfsobs_txg_sync_duration_seconds_bucket{instance="INST",le="0.01"}')
        assert got == {p: float(n) for p, n in fast.items()}
        got = at_end(server, ends, instance, 'zfsobs_txg_sync_duration_seconds_sum{instance="INST"}')
        assert got.keys() == sync.keys() and all(abs(got[p] - sync[p] / 1e9) < 1e-6 for p in sync)
        commits, lwbs = Counter(), Counter()
        for row in rep["zil"]:
            commits[row["pool"]] += row["commits"]
            lwbs[row["pool"]] += row["lwbs"]
        assert at_end(server, ends, instance, 'zfsobs_zil_commits_total{instance="INST"}') == \
            {p: float(n) for p, n in commits.items()}
        assert at_end(server, ends, instance, 'zfsobs_zil_log_blocks_total{instance="INST"}') == \
            {p: float(n) for p, n in lwbs.items()}
        if instance == "lab":
            assert sum(commits.values()) > 50, "the ZIL workload made no commits: re-record"


def test_vdev_queue_and_cache_totals_equal_the_report(backfilled):
    server, ends = backfilled
    for instance, name in CAPTURES.items():
        rep = report(os.path.join(DATA, name))
        done, enq = defaultdict(int), defaultdict(int)
        for row in rep["vdev_queue"]:
            key = (row["pool"], row["vdev"], row["class"])
            done[key] += row["done"]
            enq[key] += row["enq"]
        assert len(done) >= 10, f"{name}: {len(done)} vdev queues"
        got = at_end(server, ends, instance, 'zfsobs_vdev_queue_completed_total{instance="INST"}')
        assert got == {k: float(n) for k, n in done.items()}
        got = at_end(server, ends, instance, 'zfsobs_vdev_queue_enqueued_total{instance="INST"}')
        assert got == {k: float(n) for k, n in enq.items()}
        hits = defaultdict(int)
        for row in rep["vdev_cache"]:
            hits[(row["pool"], row["vdev"], None)] += row["hits"]
        got = at_end(server, ends, instance, 'zfsobs_vdev_cache_hits_total{instance="INST"}')
        assert got == {k: float(n) for k, n in hits.items()}
        if instance == "vdev-cache":
            assert sum(hits.values()) > 0, "the vdev cache capture has no hits: re-record"
