"""zfsobs/sources/d_slots.py: the D scripts' slot totals (zil_c, txg_thr_c, ...) become the lines of
their txgs, whose parts add up to what the probes counted. The lines are the scripts' own printa
formats (probes/illumos/zil.d, throttle.d) filled in: the real scripts run in the sid guest
(tests/test_kernel_dtrace.py)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import dlint  # noqa: E402

from zfsobs.events import Parser  # noqa: E402
from zfsobs.sources.d_slots import TAG_SHIFT, DSlots, untag, wanted  # noqa: E402

D_DIR = Path(__file__).resolve().parent.parent / "probes" / "illumos"
ZIL_C = dlint.formats((D_DIR / "zil.d").read_text())["zil_c"][0]
THR_C = dlint.formats((D_DIR / "throttle.d").read_text())["txg_thr_c"][0]
SPA = "ffff888112345000"


def fill(fmt: str, ts: int, **values) -> str:
    out = fmt.split()
    out[3] = str(ts)
    for i, tok in enumerate(out[4:], 4):
        key, _, value = tok.partition("=")
        if dlint.conversions(value):
            out[i] = f"{key}={values.get(key, 0)}"
    return " ".join(out)


def tag(txg: int, value: int) -> int:
    return (txg >> 3) << TAG_SHIFT | value


def events(lines: list[str]) -> list:
    parser = Parser()
    got = [parser.parse(line) for line in lines]
    assert parser.malformed == 0 and parser.unknown_kinds == 0
    return got


def test_both_scripts_print_slot_totals():
    assert all(wanted((D_DIR / f"{n}.d").read_text()) for n in ("zil", "throttle"))
    assert not any(wanted((D_DIR / f"{n}.d").read_text()) for n in ("txg", "vdev_queue", "vdev_cache"))


def test_each_flush_gives_the_rise_of_its_slot_to_the_txg_it_holds():
    slots = DSlots()
    out = []
    # txg 40 (slot 0): two flushes; then a flush where nothing moved; then txg 48 reuses slot 0
    out += slots.feed(fill(ZIL_C, 1000, pool="tank", spa=SPA, slot=0, txg=40, commits=3, lat_ns=300,
                           lat_max_ns=tag(40, 150), lwbs=2, nused=8192))
    out += slots.feed(fill(ZIL_C, 2000, pool="tank", spa=SPA, slot=0, txg=40, commits=5, lat_ns=700,
                           lat_max_ns=tag(40, 220), lwbs=3, nused=12288))
    out += slots.feed(fill(ZIL_C, 2000, pool="tank", spa=SPA, slot=0, txg=40, commits=5, lat_ns=700,
                           lat_max_ns=tag(40, 220), lwbs=3, nused=12288))
    out += slots.feed(fill(ZIL_C, 9000, pool="tank", spa=SPA, slot=0, txg=48, commits=5, lat_ns=700,
                           lat_max_ns=tag(40, 220), lwbs=4, nused=16384))
    got = events(out)
    assert [(e.ts, e.kind, e.get("txg"), e.get("cpu"), e.get("final"), e.get("pid")) for e in got] == \
        [(1000, "zil", 40, 1000, 0, 0), (2000, "zil", 40, 2000, 0, 0), (9000, "zil", 48, 9000, 0, 0)]
    assert [(e.get("commits"), e.get("lat_ns"), e.get("lat_max_ns"), e.get("lwbs"), e.get("nused")) for e in got] == \
        [(3, 300, 150, 2, 8192), (2, 400, 220, 1, 4096), (0, 0, 0, 1, 4096)]   # 48 has no commit: no max


def test_slots_of_other_pools_and_pool_instances_are_apart():
    slots = DSlots()
    out = []
    for pool, spa, n in (("tank", SPA, 4), ("fast", SPA[:-3] + "800", 7), ("tank", SPA[:-3] + "c00", 1)):
        out += slots.feed(fill(ZIL_C, 100 + n, pool=pool, spa=spa, slot=5, txg=13, commits=n))
    assert [(e.get("pool"), e.get("commits")) for e in events(out)] == [("tank", 4), ("fast", 7), ("tank", 1)]


def test_throttle_lines_take_their_txgs_maxima_and_sum_the_rest():
    slots = DSlots()
    first = fill(THR_C, 500, pool="tank", spa=SPA, slot=3, txg=11, dirty_max=tag(11, 1 << 30),
                 dirty_data_max=tag(11, 4 << 30), delay_min_pct=tag(11, 60), delay_scale=tag(11, 500000),
                 delays=10, delay_ns=10_000, delay_max_ns=tag(11, 3000), d0=10)
    later = fill(THR_C, 900, pool="tank", spa=SPA, slot=3, txg=19, dirty_max=tag(11, 1 << 30),
                 dirty_data_max=tag(19, 4 << 30), delay_min_pct=tag(19, 60), delay_scale=tag(19, 500000),
                 delays=10, delay_ns=10_000, delay_max_ns=tag(11, 3000), d0=10, waits=2, wait_ns=50)
    got = events(slots.feed(first) + slots.feed(later))
    assert [(e.kind, e.get("txg"), e.get("delays"), e.get("delay_ns"), e.get("delay_max_ns"), e.get("dirty_max"), e.get("dirty_data_max"),
             e.get("waits")) for e in got] == [("txg_thr", 11, 10, 10_000, 3000, 1 << 30, 4 << 30, 0),
                                           ("txg_thr", 19, 0, 0, 0, 0, 4 << 30, 2)]


def test_a_maximum_of_an_older_round_is_none():
    assert untag(tag(40, 77), 40) == 77 and untag(tag(40, 77), 47) == 77
    assert untag(tag(40, 77), 48) == 0 and untag(77, 8) == 0


def test_other_lines_pass_and_a_damaged_slot_line_is_left_for_the_parser():
    slots = DSlots()
    final = "zfsobs 1 zil 5 pool=tank pid=0 txg=4 cpu=5 final=1 commits=0"
    assert slots.feed(final) == [final] and slots.feed("") == []
    bad = "zfsobs 1 zil_c 7 pool=tank spa=1 slot=4 txg=x commits=1"
    assert slots.feed(bad) == [bad]
    stray = "zfsobs 1 zil_c 7 pool=tank spa=1 slot=4 txg=9 commits=1 torn"     # a word that is no field
    assert slots.feed(stray) == [stray]


def test_vq_dumps_of_totals_become_dumps_of_what_moved():
    """probes/dtrace-openzfs/vdev_queue.d prints totals since the start, its maxima tagged with
    the dump's round: DumpTotals hands VqDumps the rise of each sum, and each maximum of this
    round or the one before (written as the round turned) or a later one (dtrace printed the dump
    late); an older one is no maximum now."""
    from zfsobs.sources.d_slots import DUMP_TAG, DumpTotals, dump_totals
    text = (D_DIR.parent / "dtrace-openzfs" / "vdev_queue.d").read_text()
    assert dump_totals(text) and not dump_totals((D_DIR / "vdev_queue.d").read_text())
    totals = DumpTotals()
    head = "zfsobs 1 vq_dump {0} set=0 end={0} round={1}"
    out = []
    for ts, rnd, n, x in ((100, 1, 3, (1 << DUMP_TAG) | 5), (200, 2, 3, (1 << DUMP_TAG) | 5),
                          (300, 3, 7, (3 << DUMP_TAG) | 2), (400, 4, 7, (3 << DUMP_TAG) | 2)):
        out.append(totals.feed(head.format(ts, rnd)))
        out.append(totals.feed(f"@vq_n0[0, 99, 3, 0]: {n}") + totals.feed(f"@vq_x0[0, 99, 3, 1]: {x}"))
    assert out[0] == [head.format(100, 1)]
    late = totals.feed(f"@vq_x0[0, 99, 3, 0]: {(9 << DUMP_TAG) | 4}")     # printed rounds late
    assert late == ["@vq_x0[0, 99, 3, 0]: 4"]
    assert [o for i, o in enumerate(out) if i % 2] == [
        ["@vq_n0[0, 99, 3, 0]: 3", "@vq_x0[0, 99, 3, 1]: 5"],
        ["@vq_x0[0, 99, 3, 1]: 5"],                 # round 1's maximum, as round 2 turned
        ["@vq_n0[0, 99, 3, 0]: 4", "@vq_x0[0, 99, 3, 1]: 2"],
        ["@vq_x0[0, 99, 3, 1]: 2"]]
