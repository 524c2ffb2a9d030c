"""Tuning on real OpenZFS: scripts/scenario records the lab while `zfsobs lab set` changes a
tunable inside the running ztest and changes it back; the capture must carry each change at the
time it was made, the probes must show ZFS obeying each setting, and report --compare must say so.

The ground truth is the setting itself: the limit written into the process is the most async
writes a leaf vdev may have active (test_lab_vdev_queue.py checks the probe's active count
against the library's own counter), and with zfs_vdev_cache_max=1 the cache must decline every read."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import lab_ready, lab_run, lab_set, ztest_lived
from zfsobs.capture import read_capture
from zfsobs.events import Parser, parse_all
from zfsobs.model.segments import SETTLE_NS

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ok")]

SCENARIO = str(Path(__file__).resolve().parent.parent / "scripts" / "scenario")
SEGMENT = 8                     # seconds of ztest's test pass per setting
NAME = "zfs_vdev_async_write_max_active"
ASYNC_WRITE = 3
# the session polls the watcher between reads of the probes (0.5 s ticks): a change made at t is
# seen by a poll at most ~2 ticks later
SEEN_WITHIN_NS = 1_500_000_000
SET_RE = re.compile(r"set (\S+)=(\d+) between monotonic (\d+) and (\d+) ns")


def scenario(tmp_path, name, segment=SEGMENT):
    cap = tmp_path / f"{name}.cap"
    res = subprocess.run([SCENARIO, name, "--segment", str(segment), "--out", str(cap), "--format", "json"],
                         capture_output=True, text=True, timeout=600)
    ztest_lived(res.stderr)
    assert res.returncode == 0, res.stderr[-3000:]
    sets = [(m[1], int(m[2]), int(m[3]), int(m[4])) for m in SET_RE.finditer(res.stderr)]
    capture = read_capture(str(cap))
    events = parse_all(capture.lines, Parser())
    return {"report": json.loads(res.stdout), "sets": sets, "events": events, "pool": capture.meta["lab"]["pool"]}


@pytest.fixture(scope="module")
@lab_run
def max_active(tmp_path_factory):
    return scenario(tmp_path_factory.mktemp("tuning"), "async-write-max-active")


@pytest.fixture(scope="module")
@lab_run
def cache_max(tmp_path_factory):
    # ztest's cache-sized reads are sparse: a longer segment so that each has misses
    return scenario(tmp_path_factory.mktemp("tuning"), "vdev-cache-max", segment=12)


def changes(run, name):
    return [ev for ev in run["events"] if ev.kind == "tunable" and ev.get("name") == name and not ev.get("initial")]


def test_each_lab_set_is_one_tunable_event_at_the_time_it_was_made(max_active):
    evs = changes(max_active, NAME)
    assert [(ev.get("old"), ev.get("new")) for ev in evs] == [(3, 1), (1, 3)]
    assert [(s[0], s[1]) for s in max_active["sets"]] == [(NAME, 1), (NAME, 3)]
    for ev, (_, _, before, after) in zip(evs, max_active["sets"]):
        # the poll before the one that saw it had the old value: it came before the write ended
        assert ev.get("since") < after and before <= ev.ts <= after + SEEN_WITHIN_NS, (ev, before, after)
    initial = {ev.get("name"): ev.get("new") for ev in max_active["events"] if ev.kind == "tunable" and ev.get("initial")}
    assert initial[NAME] == 3 and initial["zfs_vdev_async_write_min_active"] == 1


def test_async_write_active_maximum_follows_the_limit(max_active):
    """The probe's lines, split where the setting surely held: from a settling second after a
    change up to the poll before the next, and only lines whose span since the vdev's line before
    lies there too (a line's act_max covers that span). The highest active count equals the limit
    in force, and every line read that limit."""
    first, second = changes(max_active, NAME)
    pool = max_active["pool"]
    prev, lines = {}, []
    for ev in max_active["events"]:
        if ev.kind == "vq" and ev.get("class") == ASYNC_WRITE and ev.get("pool") == pool:
            key = (ev.get("pid"), ev.get("vd"))
            lines.append((prev.get(key, ev.ts), ev))
            prev[key] = ev.ts
    spans = {3: (0, first.get("since")), 1: (first.ts + SETTLE_NS, second.get("since")),
             -3: (second.ts + SETTLE_NS, 1 << 63)}
    for limit, (t0, t1) in spans.items():
        inside = [ev for since, ev in lines if t0 <= since and ev.ts < t1]
        assert inside, f"no async_write lines with limit {abs(limit)}"
        assert max(ev.get("act_max") for ev in inside) == abs(limit), limit
        assert {ev.get("max_active") for ev in inside} == {abs(limit)}, limit


def test_report_compare_shows_the_limit_and_the_depth_on_both_sides(max_active):
    """The limit and the highest active count follow the setting exactly. The queue's depth and wait
    are shown on both sides of each change, but their direction is ztest's, not ZFS's: which way
    they go with the limit depends on how much a segment's txgs dirtied (one run: pending 220 -> 128
    as the limit fell from 3 to 1, the segment before being ztest's busiest; two others 21 -> 48 and
    4 -> 690), so no direction is asserted (docs/tuning.md: trust a ratio only over long segments)."""
    report = max_active["report"]
    assert len(report["segments"]) == 3 and len(report["changes"]) == 2
    pool = max_active["pool"]
    for change, (old, new) in zip(report["changes"], [(3, 1), (1, 3)]):
        assert [(t["name"], t["old"], t["new"]) for t in change["tunables"]] == [(NAME, old, new)]
        m = change["metrics"][pool]
        limit, top = m["vq.async_write.max_active"], m["vq.async_write.act_max"]
        assert (limit["before"]["mean"], limit["after"]["mean"]) == (old, new)
        assert limit["ratio_mean"] == pytest.approx(new / old)
        assert (top["before"]["max"], top["after"]["max"]) == (old, new)
        for name in ("vq.async_write.pend_mean", "vq.async_write.wait_mean_ns"):
            assert m[name]["before"]["n"] and m[name]["after"]["n"], (name, m[name])
            assert m[name]["before"]["mean"] >= 0 and m[name]["after"]["mean"] >= 0


def test_a_later_ztest_pass_keeps_the_setting(max_active):
    """The value went into ztest's shared options too: no pass reverted it (a revert would be a
    change event), and every process the watcher read after the change had the new value."""
    assert len(changes(max_active, NAME)) == 2


def test_vdev_cache_max_turns_inflation_off_and_on(cache_max):
    report = cache_max["report"]
    pool = cache_max["pool"]
    assert [(t["name"], t["old"], t["new"]) for c in report["changes"] for t in c["tunables"]] == \
        [("zfs_vdev_cache_max", 16384, 1), ("zfs_vdev_cache_max", 1, 16384)]
    off, on = (c["metrics"][pool] for c in report["changes"])
    amp = off["vc.amplification"]
    # each miss reads a 64 KiB line for a read of at most zfs_vdev_cache_max (16 KiB): 4x or more
    assert off["vc.inflation"]["before"]["n"] and off["vc.inflation"]["before"]["mean"] >= 4
    assert amp["before"]["mean"] > 1
    # every read declined: the device reads exactly what was asked, and no line is filled
    assert amp["after"]["n"] and amp["after"]["max"] == pytest.approx(1.0)
    assert off["vc.inflation"]["after"]["n"] == 0 and off["vc.hit_ratio"]["after"]["n"] == 0
    assert on["vc.inflation"]["after"]["n"] and on["vc.inflation"]["after"]["mean"] >= 4
    assert on["vc.amplification"]["after"]["mean"] > 1
    max_lines = [ev for ev in cache_max["events"] if ev.kind == "vc" and ev.get("pool") == pool]
    assert {ev.get("max") for ev in max_lines} == {16384, 1}


def _pass_running(top_pid: int) -> bool:
    """ztest's test pass has started: the lab's ztest (top's child) has had a second child (the
    first creates the pool)."""
    try:
        out = subprocess.run(["pgrep", "-P", str(top_pid), "-x", "ztest"], capture_output=True, text=True).stdout.split()
        kids = subprocess.run(["pgrep", "-P", out[0], "-x", "ztest"], capture_output=True, text=True).stdout.split() if out else []
    except OSError:
        return False
    _pass_running.seen.update(kids)
    return len(_pass_running.seen) >= 2


_pass_running.seen = set()
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@lab_run
def test_top_shows_a_lab_set_within_two_seconds():
    """The issue's acceptance: `zfsobs top --lab` on a terminal, `zfsobs lab set` from another
    process, and the live view shows the change (its panel, old -> new) within two seconds."""
    import fcntl
    import pty
    import struct
    import termios
    import threading
    import time
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 70, 200, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "zfsobs", "top", "--lab", "--option",
                             "zfs_vdev_async_write_min_active=1", "--option", f"{NAME}=3"],
                            stdin=slave, stdout=slave, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, COLUMNS="200", LINES="70"))
    os.close(slave)
    frames: list[tuple[float, str]] = []

    def read():
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            frames.append((time.monotonic(), chunk.decode(errors="replace")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 300
        while not _pass_running(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:] if proc.poll() else "no pass"
            time.sleep(0.2)
        time.sleep(3)
        started = time.monotonic()      # the watcher may see the write before lab set returns
        res = lab_set(proc.pid, f"{NAME}=1")     # this test's lab, whatever other labs run here
        done = time.monotonic()
        assert res.returncode == 0, res.stderr
        want = f"{NAME} 3 → 1"
        seen = None
        while seen is None and time.monotonic() < done + 5:
            if want in ANSI.sub("", "".join(f for t, f in frames if t >= started)):
                seen = time.monotonic()       # at most one 50 ms nap late
            time.sleep(0.05)
        assert seen is not None, ANSI.sub("", "".join(f for _, f in frames))[-3000:]
        print(f"\nchange on screen {seen - done:.2f} s after lab set returned")
        assert seen - done <= 2.0
        before = ANSI.sub("", "".join(f for t, f in frames if t < started))
        # before: the live view, and no tuning panel (the watched values' line is last and may be cropped)
        assert "vdev queue zfsobs_lab_" in before and want not in before and "╭─ tuning" not in before
    finally:
        os.write(master, b"q")
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        os.close(master)
        err = proc.stderr.read()
        ztest_lived(err)
    assert proc.returncode == 0, err[-2000:]
