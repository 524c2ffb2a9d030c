"""kstat mode without a kernel: its parsers, its queue sampler and the views of a kstat-mode capture,
fed what a real kernel lab run printed and recorded (tests/data/kstat-2.1.11*, see README.md there;
re-record with scripts/kernel-kstat). The mode itself against tracing: tests/test_kernel_kstat.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from rich.console import Console

from conftest import DATA
from zfsobs.sources import kstats
from zfsobs.capture import read_capture
from zfsobs.events import Parser, parse_all
from zfsobs.sources.kstat_queue import QueueSampler
from zfsobs.model import Model
from zfsobs.views import report
from zfsobs.views.screen import render_screen
from zfsobs.views.status import Status

CAP = os.path.join(DATA, "kstat-2.1.11.cap")
RAW = os.path.join(DATA, "kstat-2.1.11")
PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def raw(name: str) -> str:
    with open(os.path.join(RAW, name)) as f:
        return f.read()


def test_the_kstat_parsers_read_what_the_kernel_printed():
    rows = kstats.txgs(raw("txgs"))
    assert len(rows) >= 20 and {r["state"] for r in rows.values()} >= {"C", "O"}
    last = rows[max(t for t, r in rows.items() if r["state"] == "C")]
    assert set(last) == {"txg", "birth", "state", "ndirty", "nread", "nwritten", "reads", "writes",
                         "otime", "qtime", "wtime", "stime"} and last["stime"] > 0
    before, after = kstats.named(raw("zil.before")), kstats.named(raw("zil.after"))
    assert after["zil_commit_count"] - before["zil_commit_count"] > 1000 and "zil_itx_metaslab_slog_bytes" in after


def test_the_queue_sampler_integrates_each_sample_until_the_next():
    """The real iostat output, its samples 0.2 s apart: integrals are depth x time per sample,
    maxima the highest sampled, a line per moving series each second."""
    sampler = QueueSampler(["zfsobs_klab"])
    blocks, block = [], []
    for line in raw("iostat-q.txt").splitlines(keepends=True):
        if line.strip().isdigit():
            if block:
                blocks.append(block)
            block = []
        else:
            block.append(line)
    blocks.append(block)
    assert len(blocks) == 10
    step = 200_000_000
    depths = {}                        # what each sample said, by (leaf, class)
    for i, b in enumerate(blocks):
        sampler._sample(i * step, b)
        for line in b:
            row = kstats.iostat_q_row(line)
            if row and row[0].startswith("/"):
                for cls, d in row[1].items():
                    depths.setdefault((row[0], cls), []).append(d)
    lines = sampler._flush(10 * step)
    events = [ev for ev in parse_all(lines, Parser()) if ev.kind == "vq"]
    assert events and {ev.get("pool") for ev in events} == {"zfsobs_klab"}
    for ev in events:
        seen = depths[(ev.get("vd"), ev.get("class"))]
        assert ev.get("pend_ns") == sum(p for p, _ in seen) * step
        assert ev.get("act_ns") == sum(a for _, a in seen) * step
        assert (ev.get("pend_max"), ev.get("act_max")) == (max(p for p, _ in seen), max(a for _, a in seen))
    assert any(ev.get("act_ns") for ev in events)       # the burst was on


def test_a_kstat_capture_reports_what_it_lacks_as_unavailable():
    text = report.render(read_capture(CAP), "text")
    assert "source: kstat mode" in text and "-/-/-/-" in text
    data = json.loads(report.render(read_capture(CAP), "json"))
    zil = data["summary"]["zil"]["zfsobs_klab"]
    assert zil["commits"] > 1000 and zil["lwbs"] > 0 and zil["lat_p99_ns"] is None and zil["itxs"] is None
    assert data["meta"]["unavailable_fields"]["zil"] and "enq" in data["meta"]["unavailable_fields"]["vdev_queue"]
    assert all(r["enq"] is None for r in data["vdev_queue"]) and data["vdev_queue"]
    txg = data["summary"]["txg"]["zfsobs_klab"]
    assert txg["txgs"] >= 5 and txg["sync_ns"]["max"] > 0          # the txg panel loses nothing


def test_the_screen_says_kstat_mode_and_shows_no_latency():
    cap = read_capture(CAP)
    model = Model()
    for ev in parse_all(cap.lines, Parser()):
        model.feed(ev)
    console = Console(record=True, width=120, height=40, file=open(os.devnull, "w"))
    console.print(render_screen(model, Status(cap.meta, mode="replay"), 40, model.last_ts))
    text = console.export_text()
    assert "kstat mode" in text and "latency -" in text and "─ vdev queue" in text


def run(*args):
    return subprocess.run([sys.executable, "-m", "zfsobs", *args], cwd=PROJECT, capture_output=True, text=True,
                          timeout=60)


def test_kstat_mode_where_there_are_no_kstats_is_a_one_line_error():
    for args in (["record", "-O", "/tmp/zfsobs-never.cap", "--source", "kstat", "--target", "libzpool"],
                 ["top", "--lab", "--source", "kstat"]):
        res = run(*args)
        assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
        assert len(res.stderr.strip().splitlines()) == 1 and "kstat" in res.stderr, res.stderr
