"""Live: a real Prometheus (Debian's 2.42) scrapes `zfsobs exporter --lab` every second while the lab
runs the ZIL workload with the vdev cache on, and a tunable is changed halfway. The exporter also
records the run (-O), and lingers with its last values once the lab ends. What Prometheus holds at
the end equals `zfsobs report` of that capture; every PromQL expression of the Grafana dashboard
runs and returns data; `promtool check metrics` finds nothing in a scrape."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter, defaultdict

import pytest

from conftest import lab_ready, lab_run, lab_set, ztest_lived
from prom_server import Prometheus, free_port, missing, wait_for
from zfsobs.capture import read_capture
from zfsobs.events import Parser, parse_all
from zfsobs.model import Model

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready() or missing()), reason=lab_ready() or missing() or "ok")]

ZFSOBS = [sys.executable, "-m", "zfsobs"]
DASHBOARD = os.path.join(os.path.dirname(__file__), "..", "docs", "grafana", "zfsobs-dashboard.json")
CHANGE = "zfs_vdev_async_write_max_active=5"


@pytest.fixture(scope="module")
@lab_run
def live(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prom-live")
    port, cap, err = free_port(), tmp / "live.cap", tmp / "exporter.err"
    server = Prometheus(tmp, scrape=f"127.0.0.1:{port}")
    with open(err, "w") as errf:
        proc = subprocess.Popen(ZFSOBS + ["exporter", "--lab", "--lab-time", "40", "--workload", "zil",
                                          "-o", "zfs_vdev_cache_size=10485760", "--listen", f"127.0.0.1:{port}",
                                          "-O", str(cap)], stdout=subprocess.DEVNULL, stderr=errf)
    try:
        wait_for(err, "serving /metrics", proc, 120)
        start = time.time()
        time.sleep(15)
        res = lab_set(proc.pid, CHANGE)        # this test's lab, whatever other labs run here
        assert res.returncode == 0, res.stderr
        wait_for(err, "serving the last values", proc, 400)
        lab_end = time.time()
        time.sleep(4)       # scrapes of the final values
        end = time.time()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                     headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        with urllib.request.urlopen(req, timeout=10) as r:
            om = (r.headers.get("Content-Type", ""), r.read().decode())
        rep = json.loads(subprocess.run(ZFSOBS + ["report", str(cap), "--format", "json"], capture_output=True,
                                        text=True, check=True).stdout)
        yield {"server": server, "start": start, "end": end, "lab_end": lab_end, "text": text, "om": om,
               "report": rep, "capture": read_capture(str(cap))}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        server.stop()
        ztest_lived(err.read_text())
    assert code == 0, err.read_text()[-2000:]


def now(live, expr):
    return {frozenset(k): v for k, v in live["server"].query(expr, live["end"]).items()}


def by(result, *names):
    return {tuple(dict(k).get(n) for n in names): v for k, v in result.items()}


def test_prometheus_holds_what_the_capture_holds(live):
    rep = live["report"]
    txgs, commits = Counter(r["pool"] for r in rep["txgs"]), Counter()
    for row in rep["zil"]:
        commits[row["pool"]] += row["commits"]
    # the floors say only that there is something to compare: ztest's pace follows the machine's load
    # (40 s of the zil workload made 45 commits under CI's, 386 txgs), the equalities are the check
    assert sum(txgs.values()) >= 50 and sum(commits.values()) >= 10, (txgs, commits)
    assert by(now(live, "zfsobs_txg_sync_duration_seconds_count"), "zpool") == {(p,): float(n) for p, n in txgs.items()}
    assert by(now(live, "zfsobs_zil_commits_total"), "zpool") == {(p,): float(n) for p, n in commits.items()}
    done = defaultdict(int)
    for row in rep["vdev_queue"]:
        done[(row["pool"], row["vdev"], row["class"])] += row["done"]
    assert by(now(live, "zfsobs_vdev_queue_completed_total"), "zpool", "vdev", "priority") == \
        {k: float(n) for k, n in done.items()}
    hits = Counter()
    for row in rep["vdev_cache"]:
        hits[(row["pool"], row["vdev"])] += row["hits"]
    assert sum(hits.values()) > 0, "the vdev cache served nothing"
    assert by(now(live, "zfsobs_vdev_cache_hits_total"), "zpool", "vdev") == {k: float(n) for k, n in hits.items()}
    name, value = CHANGE.split("=")
    assert by(now(live, f'zfsobs_tunable_value{{name="{name}"}}'), "name") == {(name,): float(value)}


def test_rate_of_the_depth_integral_is_the_mean_depth(live):
    """What a user does in PromQL, rate() of the integral, against the exact time-weighted mean of
    the same run's capture over the same 20 s (the run's busiest for async writes): they differ
    only by the scrapes' timing (a snapshot is up to ~1 s behind the probes, at both ends)."""
    cap = live["capture"]
    model = Model(keep=None, samples=False)
    for ev in parse_all(cap.lines, Parser()):
        model.feed(ev)
    to_mono = cap.meta["start_mono_ns"] - cap.meta["start_wall_ns"]
    writes = [s for s in model.vq.series.values() if s.cls == 3]

    def exact(at: float) -> float:
        t1 = int(at * 1e9) + to_mono
        total = 0
        for s in writes:
            end, start = s.at(t1), s.at(t1 - 20 * 10**9)
            if end is not None:
                total += end["act_ns"] - (start["act_ns"] if start else 0)
        return total / 20e9

    ends = [live["start"] + 25 + i for i in range(int(live["lab_end"] - live["start"] - 25))]
    at = max(ends, key=exact)
    mean = exact(at)
    assert mean > 0.1, f"async writes too few to compare: mean active {mean:.3f}"
    prom = sum(live["server"].query('rate(zfsobs_vdev_queue_active_seconds_total{priority="async_write"}[20s])', at).values())
    assert abs(prom - mean) <= 0.15 * mean + 0.05, (prom, mean, at - live["start"])


def test_every_dashboard_expression_returns_data(live):
    dash = json.load(open(DASHBOARD))
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [a["expr"] for a in dash["annotations"]["list"]]
    assert len(exprs) >= 10
    for expr in exprs:
        q = expr.replace("$__rate_interval", "5s").replace("$zpool", ".*")
        result = live["server"].query_range(q, live["start"], live["end"], 1)
        assert result, f"no data: {q}"


def test_a_scrape_passes_promtool_and_negotiates_openmetrics(live):
    check = subprocess.run(["promtool", "check", "metrics"], input=live["text"], capture_output=True, text=True)
    assert check.returncode == 0 and not (check.stdout + check.stderr).strip(), check.stdout + check.stderr
    kind, body = live["om"]
    assert kind.startswith("application/openmetrics-text") and body.endswith("# EOF\n"), kind
    assert "zfsobs_build_info{" in live["text"] and "# TYPE zfsobs_txg_sync_duration_seconds histogram" in live["text"]


def test_exporter_duration_stops_it():
    """`exporter --lab --duration S` ends once S seconds are recorded (--help says so); it went on
    serving the last values until Ctrl-C, as after a lab that ended by itself."""
    port = free_port()
    r = subprocess.run(ZFSOBS + ["exporter", "--lab", "--duration", "3", "--listen", f"127.0.0.1:{port}"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stderr.rstrip().endswith("zfsobs: stopped: duration reached"), r.stderr
    assert "serving the last values" not in r.stderr
