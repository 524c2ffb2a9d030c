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

from conftest import lab_ready, lab_run, load_capture, truth_running, ztest_lived
from zfsobs.model.vdev_cache import derive
from zfsobs.targets.target import libzpool

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ok")]

ZFSOBS = [sys.executable, "-m", "zfsobs"]
LAB_SECONDS = 12
SIZE = "zfs_vdev_cache_size=10485760"
# Per process: the library's counters at every vdev_free. Per process and pool (the capture keeps
# the lab's pools only; ztest also reads through a "$import" pool of its own, which the library's
# per-process counters include): reads offered and taken (vdev_cache_read returning 1; a call is
# matched to its return by its stack pointer: the return address is popped, so sp + 8), fills
# (priority NOW, on the fill's vdev's pool) and the fills' bytes at completion or merge.
TRUTH = r"""
uprobe:LIB:vdev_free {
    $b = reg("ip") - FREE;
    @d[pid] = max(*(uint64 *)($b + DELEG)); @h[pid] = max(*(uint64 *)($b + HITS));
    @m[pid] = max(*(uint64 *)($b + MISSES));
}
uprobe:LIB:vdev_cache_read /(*(uint32 *)(arg0 + 784) & 2048) == 0/ {
    @c[tid, reg("sp")] = *(uint64 *)(*(uint64 *)(arg0 + 592) + 104);
}
uretprobe:LIB:vdev_cache_read /@c[tid, reg("sp") - 8]/ {
    $spa = @c[tid, reg("sp") - 8];
    delete(@c[tid, reg("sp") - 8]);
    @offered[pid, str($spa)] = count();
    @taken[pid, str($spa)] = sum(retval & 1);
}
uprobe:LIB:zio_vdev_delegated_io /arg5 == 10/ { @f[tid] = *(uint64 *)(arg0 + 104); @fills[pid, str(*(uint64 *)(arg0 + 104))] = count(); }
uretprobe:LIB:zio_vdev_delegated_io /@f[tid]/ { @fio[pid, retval] = @f[tid]; delete(@f[tid]); }
uprobe:LIB:vdev_queue_io_done /@fio[pid, arg0]/ {
    @bytes[pid, str(@fio[pid, arg0])] = sum(*(uint64 *)(arg0 + 576)); delete(@fio[pid, arg0]);
}
uprobe:LIB:zio_vdev_io_bypass /@fio[pid, arg0]/ {
    @bytes[pid, str(@fio[pid, arg0])] = sum(*(uint64 *)(arg0 + 576)); delete(@fio[pid, arg0]);
}
END { clear(@c); clear(@f); clear(@fio); }
"""
TRUTH_RE = re.compile(r"^@(\w+)\[(\d+)(?:, (\S+))?\]: (\d+)$")


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
    ztest_lived(res.stderr)
    assert res.returncode == 0, res.stderr
    return load_capture(cap, "vc")


@pytest.fixture(scope="module")
@lab_run
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
    truth = defaultdict(dict)        # pid -> {name or (name, pool): value}
    for line in (tmp / "truth.out").read_text().splitlines():
        m = TRUTH_RE.match(line)
        if m:
            truth[int(m[2])][(m[1], m[3]) if m[3] else m[1]] = int(m[4])
    return {"on": on, "truth": truth, "max1": record(tmp, "max1", [SIZE, "zfs_vdev_cache_max=1"]),
            "off": record(tmp, "off", [])}


def per_pool(lines):
    """Sums over every vdev incarnation's final line, per (process, pool); and the processes whose
    every vdev ended with final=1 (a clean exit: every read was followed to the end)."""
    sums, last = defaultdict(lambda: defaultdict(int)), {}
    for ev in lines:
        last[(ev.get("pid"), ev.get("vd"))] = ev
        if ev.get("final"):
            for k in ("reads", "hits", "misses", "declined", "fill_bytes", "read_bytes", "hit_bytes",
                      "miss_bytes", "declined_bytes"):
                sums[(ev.get("pid"), ev.get("pool"))][k] += ev.get(k)
            del last[(ev.get("pid"), ev.get("vd"))]
    return sums, {pid for pid, _ in sums} - {pid for pid, _ in last}


def test_hits_and_misses_equal_the_librarys_own_counters(runs):
    capture, model, lines = runs["on"]
    sums, clean = per_pool(lines)
    truth = runs["truth"]
    assert clean, "no lab process ended with every vdev freed"
    for (pid, pool), s in sums.items():
        t = truth[pid]
        # ours against the independent per-pool counts (hits include the kstat's delegations)
        assert (s["reads"], s["hits"] + s["misses"], s["misses"]) == \
            (t.get(("offered", pool)), t.get(("taken", pool)), t.get(("fills", pool), 0)), f"{pid} {pool}: {dict(s)} {t}"
        # every miss read one whole 64 KiB line, and the device read exactly that for them
        assert s["fill_bytes"] == s["misses"] * 65536 == t.get(("bytes", pool), 0), f"{pid} {pool}: {dict(s)} {t}"
        assert s["reads"] == s["hits"] + s["misses"] + s["declined"]
        assert s["read_bytes"] == s["hit_bytes"] + s["miss_bytes"] + s["declined_bytes"]
    checked = 0
    for pid in clean:
        t = truth.get(pid, {})
        if "m" not in t:
            continue
        checked += 1
        # and those counts, over all the process's pools, against the library's own counters
        taken = sum(v for k, v in t.items() if k[0] == "taken")
        fills = sum(v for k, v in t.items() if k[0] == "fills")
        assert (taken, fills) == (t["d"] + t["h"] + t["m"], t["m"]), f"pid {pid}: {t}"
    assert checked, f"no clean lab process in the truth: ours {sorted(clean)}, truth {sorted(truth)}"
    total = derive(model.vc.by_pool()[capture.meta["lab"]["pool"]])
    print(f"\nvdev_cache on: {total['reads']} reads, {total['hits']} hits, {total['misses']} misses, "
          f"inflation {total['inflation']:.2f}x, net {total['net']:.2f}x, amplification {total['amplification']:.2f}x")
    assert total["misses"] > 100 and total["hits"] > 100, total
    assert total["inflation"] > 1, f"ztest's small reads must be inflated to 64 KiB lines: {total}"
    assert model.vc.state()[0] == "active"


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
    for ev in lines:     # no look, no wait: every read declined as it comes
        assert ev.get("size") == 0 and ev.get("hits") == ev.get("misses") == 0, ev.line()
        # exact once the vdev is freed; a line made while other CPUs count may have reads ahead
        # (probes/linux/vdev_cache.bt sums outcomes before reads), never behind
        assert ev.get("declined") == ev.get("reads") if ev.get("final") else ev.get("declined") <= ev.get("reads"), ev.line()
    assert any(ev.get("final") for ev in lines)
    state, why = model.vc.state()
    assert state == "disabled" and "zfs_vdev_cache_size=0" in why, (state, why)


def test_report_and_doctor_say_the_same_state(runs, capsys):
    from zfsobs.views import report
    for name, want in (("on", "active"), ("off", "disabled")):
        capture = runs[name][0]
        data = report.as_dict(capture)
        assert data["summary"]["vdev_cache"]["state"] == want
        assert f"vdev_cache: {want}" in report.render(capture, "text")
