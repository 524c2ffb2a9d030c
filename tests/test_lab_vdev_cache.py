"""vdev_cache end to end on real OpenZFS 2.1 (the cache is gone in 2.2+: tests/test_lab_zfs23.py).
Three `zfsobs record --lab` runs: the cache on (with an independent ground truth), the cache on
with zfs_vdev_cache_max=1 (seed 002's workaround: nothing is inflated), and the default (off).

Ground truth: the library's OWN counters, vdc_stats (the vdev_cache_stats kstat: delegations,
hits, misses), which are static in libzpool: their addresses are read off the disassembly of
vdev_cache_read (the three `lea vdc_stats.x(%rip),%rdi; call atomic_inc_64`), and an independent
bpftrace reads them at every vdev_free; and the bytes the device read for the cache's fills,
counted when those I/Os complete (vdev_queue_io_done) or are merged into an aggregate read
(zio_vdev_io_bypass: fills are queued like any read), not when they are created."""
from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict

import pytest

from conftest import lab_ready, truth_running
from zfsobs.capture import read_capture
from zfsobs.events import Parser, parse_all
from zfsobs.model import Model
from zfsobs.model.vdev_cache import derive
from zfsobs.targets import libzpool

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ok")]

ZFSOBS = [sys.executable, "-m", "zfsobs"]
LAB_SECONDS = 12
SIZE = "zfs_vdev_cache_size=10485760"
TRUTH = r"""
uprobe:LIB:vdev_free {
    $b = reg("ip") - FREE;
    @d[pid] = max(*(uint64 *)($b + DELEG)); @h[pid] = max(*(uint64 *)($b + HITS));
    @m[pid] = max(*(uint64 *)($b + MISSES));
}
uprobe:LIB:vdev_cache_read /(*(uint32 *)(arg0 + 784) & 2048) == 0/ { @offered[pid] = count(); }
uprobe:LIB:zio_vdev_delegated_io /arg5 == 10/ { @f[tid] = 1; }
uretprobe:LIB:zio_vdev_delegated_io /@f[tid]/ { @fio[pid, retval] = 1; delete(@f[tid]); }
uprobe:LIB:vdev_queue_io_done /@fio[pid, arg0]/ {
    @done[pid] = count(); @bytes[pid] = sum(*(uint64 *)(arg0 + 576)); delete(@fio[pid, arg0]);
}
uprobe:LIB:zio_vdev_io_bypass /@fio[pid, arg0]/ {
    @merged[pid] = count(); @bytes[pid] = sum(*(uint64 *)(arg0 + 576)); delete(@fio[pid, arg0]);
}
END { clear(@f); clear(@fio); }
"""
TRUTH_RE = re.compile(r"^@(\w+)\[(\d+)\]: (\d+)$")


def vdc_stats(lib: str) -> tuple[int, int, int, int, int]:
    """(vdev_cache_read, vdev_free, delegations, hits, misses) file addresses in the library."""
    syms = {}
    for line in subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 3:
            syms[parts[2]] = int(parts[0], 16)
    start = syms["vdev_cache_read"]
    end = min(a for a in syms.values() if a > start)
    asm = subprocess.run(["objdump", "-d", f"--start-address={start:#x}", f"--stop-address={end:#x}", lib],
                         capture_output=True, text=True).stdout.splitlines()
    bumps = sorted({int(re.search(r"# ([0-9a-f]+)", prev).group(1), 16)
                    for prev, line in zip(asm, asm[1:])
                    if "atomic_inc_64" in line and "lea" in prev and "%rdi" in prev and "#" in prev})
    assert len(bumps) == 3, f"expected three vdc_stats bumps in vdev_cache_read, found {bumps}"
    return (start, syms["vdev_free"], *bumps)     # kstat_named_t order: delegations, hits, misses


def record(tmp, name, options):
    cap = tmp / f"{name}.cap"
    args = [a for o in options for a in ("--option", o)]
    res = subprocess.run(ZFSOBS + ["record", "--lab", "--lab-time", str(LAB_SECONDS), *args, "-O", str(cap)],
                         capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr
    capture = read_capture(str(cap))
    model = Model(keep=None)
    events = list(parse_all(capture.lines, Parser()))
    for ev in events:
        model.feed(ev)
    return capture, model, [ev for ev in events if ev.kind == "vc"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    lib = libzpool()
    if lib.version != "2.1.11":
        pytest.skip("the vdev cache exists up to OpenZFS 2.1; the truth reads 2.1.11 offsets")
    tmp = tmp_path_factory.mktemp("vc")
    _, free, deleg, hits, misses = vdc_stats(lib.path)
    script = (TRUTH.replace("FREE", str(free)).replace("DELEG", str(deleg)).replace("HITS", str(hits))
              .replace("MISSES", str(misses)))
    with truth_running(tmp, script, lib.path):
        on = record(tmp, "on", [SIZE])
    truth = defaultdict(dict)
    for line in (tmp / "truth.out").read_text().splitlines():
        m = TRUTH_RE.match(line)
        if m:
            truth[int(m[2])][m[1]] = int(m[3])
    return {"on": on, "truth": truth, "max1": record(tmp, "max1", [SIZE, "zfs_vdev_cache_max=1"]),
            "off": record(tmp, "off", [])}


def per_pid(lines):
    """Sums over every vdev incarnation's final line, per process; and the processes whose every
    vdev ended with final=1 (a clean exit: every read was followed to the end)."""
    sums, clean, last = defaultdict(lambda: defaultdict(int)), defaultdict(lambda: True), {}
    for ev in lines:
        last[(ev.get("pid"), ev.get("vd"))] = ev
        if ev.get("final"):
            for k, v in ev.fields.items():
                if isinstance(v, int):
                    sums[ev.get("pid")][k] += v
            del last[(ev.get("pid"), ev.get("vd"))]
    for (pid, _), _ev in last.items():
        clean[pid] = False
    return sums, {pid for pid in sums if clean[pid]}


def test_hits_and_misses_equal_the_librarys_own_counters(runs):
    capture, model, lines = runs["on"]
    sums, clean = per_pid(lines)
    truth = runs["truth"]
    assert clean, "no lab process ended with every vdev freed"
    checked = 0
    for pid in clean:
        t, s = truth.get(pid), sums[pid]
        if not t or "m" not in t:
            continue
        checked += 1
        # our hits are the kstat's hits plus delegations (a read that joins a fill in flight)
        assert (s["reads"], s["hits"], s["misses"]) == (t.get("offered"), t["h"] + t["d"], t["m"]), \
            f"pid {pid}: ours {dict(s)} truth {t}; other pids: {[(p, dict(sums[p]), truth.get(p)) for p in sums]}"
        # every miss read one whole 64 KiB line, and the device read exactly that for them
        assert s["fill_bytes"] == s["misses"] * 65536 == t.get("bytes", 0), f"pid {pid}: {dict(s)} {t}"
        assert s["reads"] == s["hits"] + s["misses"] + s["declined"]
        assert s["read_bytes"] == s["hit_bytes"] + s["miss_bytes"] + s["declined_bytes"]
    assert checked, f"no clean lab process in the truth: ours {sorted(clean)}, truth {sorted(truth)}"
    total = derive(model.vc.by_pool()[capture.meta["lab"]["pool"]])
    print(f"\nvdev_cache on: {total['reads']} reads, {total['hits']} hits, {total['misses']} misses, "
          f"inflation {total['inflation']:.2f}x, net {total['net']:.2f}x, amplification {total['amplification']:.2f}x")
    assert total["misses"] > 100 and total["hits"] > 100, total
    assert total["inflation"] > 1, f"ztest's small reads must be inflated to 64 KiB lines: {total}"
    assert model.vc.state() [0] == "active"


def test_cache_max_1_inflates_nothing(runs):
    _, model, lines = runs["max1"]
    assert lines
    for ev in lines:
        assert ev.get("max") == 1 and ev.get("size") == 10485760, ev.line()
        assert ev.get("hits") == ev.get("misses") == ev.get("fill_bytes") == 0, ev.line()
        # a line made when a read enters counts it before its outcome: exact once the vdev is freed
        assert ev.get("declined") == ev.get("reads") if ev.get("final") else ev.get("declined") <= ev.get("reads")
    total = derive(model.vc.by_pool()[runs["max1"][0].meta["lab"]["pool"]])
    assert total["inflation"] is None and total["amplification"] == 1.0, total
    assert model.vc.state()[0] == "active"


def test_default_is_disabled(runs):
    _, model, lines = runs["off"]
    assert lines
    assert all(ev.get("size") == 0 and ev.get("declined") == ev.get("reads") for ev in lines)   # no look, no wait
    state, why = model.vc.state()
    assert state == "disabled" and "zfs_vdev_cache_size=0" in why, (state, why)


def test_report_and_doctor_say_the_same_state(runs, capsys):
    from zfsobs.views import report
    for name, want in (("on", "active"), ("off", "disabled")):
        capture = runs[name][0]
        data = report.as_dict(capture)
        assert data["summary"]["vdev_cache"]["state"] == want
        assert f"vdev_cache: {want}" in report.render(capture, "text")
