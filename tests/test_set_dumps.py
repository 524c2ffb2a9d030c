"""zfsobs/sources/set_dumps.py: the dumps of a probe's map sets made into its lines by one rule
(docs/events.md, "Map sets"), for each probe that counts in them (zfsobs/sources/set_lines.py)."""
from __future__ import annotations

from zfsobs.events import Parser
from zfsobs.fields import THROTTLE, VDEV_CACHE, ZIL
from zfsobs.sources import set_dumps
from zfsobs.sources.set_dumps import SetDumps

def _dump(end: int, entries: dict, kind=ZIL) -> list[str]:
    """A dump of one map set as bpftrace prints it: keys (pid, k1, k2, slot) signed."""
    out = [f"zfsobs 1 set_dump {end + 1} set=0 end={end} held=0"]
    for (pid, spa, txg, field), value in entries.items():
        which, slot = kind.slot(field)
        out.append(f"@{which}0[{pid}, {spa - (1 << 64)}, {txg}, {slot}]: {value}")
    return out + [f"zfsobs 1 set_dump_end {end + 1}"]


def test_set_dumps_make_open_final_and_late_lines_by_one_rule():
    """An open txg's lines at most once a second (final=0, the dump's time); its final lines once a
    dump covers its close (final=1, the close's time); a count after them, its lines again (final=2);
    at the stop the open txgs' lines; the sums of every dump, per txg, whatever set they came in."""
    spa, ns = (1 << 64) - 4096, 10**9
    sd, parser = SetDumps("zil", 4096), Parser()

    def feed(lines):
        return [parser.parse(x) for line in lines for x in sd.feed(line)]

    assert feed([f"zfsobs 1 set_pool 5 pid=0 spa={hex(spa)} pool=tank"]) == []
    got = feed(_dump(1 * ns, {(0, spa, 41, "lat_b3"): 3, (0, spa, 41, "lat_max_ns"): 900}))
    assert [(e.kind, e.ts, e.fields["final"], e.fields.get("commits")) for e in got][:2] == \
        [("zil", ns, 0, 3), ("zil_itx", ns, 0, None)]
    assert got[0].fields["pool"] == "tank" and got[0].fields["lat_max_ns"] == 900
    # a second dump 0.5 s later: counted, not shown yet (once a second)
    assert feed(_dump(ns + ns // 2, {(0, spa, 41, "lat_b3"): 2, (0, spa, 41, "lat_max_ns"): 400})) == []
    # the close, not yet covered by a dump; then the dump that covers it: final lines at the close's time
    assert feed([f"zfsobs 1 set_close {2 * ns} pid=0 spa={hex(spa)} txg=41"]) == []
    got = feed(_dump(2 * ns + 1, {(0, spa, 42, "lat_b3"): 1}))
    final = [e for e in got if e.kind == "zil" and e.fields["txg"] == 41]
    assert [(e.ts, e.fields["final"], e.fields["commits"], e.fields["lat_max_ns"]) for e in final] == [(2 * ns, 1, 5, 900)]
    assert [e.fields["final"] for e in got if e.kind == "zil" and e.fields["txg"] == 42] == [0]
    # a late count for 41: its lines again, final=2, with the new total
    got = feed(_dump(3 * ns, {(0, spa, 41, "lwb_le4k"): 1}))
    late = [e for e in got if e.kind == "zil" and e.fields["txg"] == 41]
    assert [(e.fields["final"], e.fields["commits"], e.fields["lwbs"]) for e in late] == [(2, 5, 1)]
    # the stop: the open txg's counts not yet shown
    assert feed(_dump(3 * ns, {(0, spa, 42, "lat_b3"): 4})) == []      # shown 1 s ago at most
    out = [parser.parse(x) for x in sd.flush()]
    assert [(e.fields["txg"], e.fields["final"], e.fields["commits"]) for e in out if e.kind == "zil"] == [(42, 0, 5)]


def test_set_dumps_say_what_they_could_not_keep():
    """A set map that filled up lost counts (cause=map_full); a count for a txg forgotten long
    after its final lines is lost too (cause=late), never a wrong total."""
    spa, ns = (1 << 64) - 4096, 10**9
    sd, parser = SetDumps("zil", 16), Parser()
    lines = [f"zfsobs 1 set_close {ns} pid=0 spa={hex(spa)} txg=1"] + _dump(2 * ns, {(0, spa, 1, "lat_b3"): 1})
    for t in range(2, 2 + set_dumps.KEEP_FINAL):
        lines.append(f"zfsobs 1 set_close {ns * t + 1} pid=0 spa={hex(spa)} txg={t}")
    lines += _dump(199 * ns, {}) + _dump(200 * ns, {(0, spa, 1, "lat_b3"): 1})
    lost = [parser.parse(x) for line in lines for x in sd.feed(line)]
    lost = [e for e in lost if e.kind == "lost"]
    assert [(e.fields["count"], e.fields["cause"]) for e in lost] == [(1, "late")]
    full = {(0, spa, 1000 + t, "lat_b3"): 1 for t in range(16)}
    got = [parser.parse(x) for line in _dump(300 * ns, full) for x in sd.feed(line)]
    assert [(e.fields["count"], e.fields["cause"]) for e in got if e.kind == "lost"] == [(1, "map_full")]


def test_throttle_lines_come_as_a_txg_closes_and_a_late_one_carries_what_they_missed():
    """txg_thr lines add up (the D twin's do too): the final line has the txg's counts as it closed,
    with the tunables of its close line; a late count comes as late=1 with only what the line
    missed; no line while the txg is open, but at the stop."""
    spa, ns = (1 << 64) - 8192, 10**9
    sd, parser = SetDumps("throttle", 4096), Parser()

    def feed(lines):
        return [parser.parse(x) for line in lines for x in sd.feed(line)]

    assert feed([f"zfsobs 1 set_pool 5 pid=7 spa={hex(spa)} pool=tank"]) == []
    assert feed(_dump(ns, {(7, spa, 9, "delays"): 2, (7, spa, 9, "delay_ns"): 50, (7, spa, 9, "dirty_max"): 900,
                           (7, spa, 9, "d1"): 2}, THROTTLE)) == []
    assert feed([f"zfsobs 1 set_close {2 * ns} pid=7 spa={hex(spa)} txg=9 dirty_data_max=4096 delay_min_pct=60 "
                 "delay_scale=500000"]) == []
    got = feed(_dump(2 * ns, {(7, spa, 9, "delays"): 1, (7, spa, 9, "delay_ns"): 5, (7, spa, 10, "waits"): 1}, THROTTLE))
    assert [(e.ts, e.fields["txg"], e.fields["late"], e.fields["delays"], e.fields["delay_ns"], e.fields["d1"],
             e.fields["dirty_max"], e.fields["dirty_data_max"], e.fields["pool"]) for e in got] == \
        [(2 * ns, 9, 0, 3, 55, 2, 900, 4096, "tank")]
    got = feed(_dump(3 * ns, {(7, spa, 9, "delays"): 1, (7, spa, 9, "delay_ns"): 7, (7, spa, 9, "dirty_max"): 100}, THROTTLE))
    assert [(e.fields["late"], e.fields["delays"], e.fields["delay_ns"], e.fields["d1"], e.fields["dirty_max"])
            for e in got] == [(1, 1, 7, 0, 900)]
    out = [parser.parse(x) for x in sd.flush()]
    assert [(e.fields["txg"], e.fields["late"], e.fields["waits"], e.fields["dirty_data_max"]) for e in out] == [(10, 0, 1, None)]


def test_vdev_cache_lines_are_cumulative_per_incarnation_and_end_at_vdev_free():
    """A vdev's vc line at most once a second, with its identity and the tunables of its vc_id line;
    final=1 once the dumps cover its vc_close; the next incarnation at the same address starts from
    zero; a count after the close cannot come and would be lost, never a second last line."""
    vd, ns = (1 << 64) - 65536, 10**9
    sd, parser = SetDumps("vdev_cache", 4096), Parser()

    def feed(lines):
        return [parser.parse(x) for line in lines for x in sd.feed(line)]

    assert feed([f"zfsobs 1 vc_id 5 pool=tank pid=3 vd={hex(vd)} gen=0 size=65536 max=16384 bshift=16 "
                 "guid=77 path=/dev/sda"]) == []
    got = feed(_dump(ns, {(3, vd, 0, "reads"): 4, (3, vd, 0, "hits"): 1, (3, vd, 0, "declined"): 3}, VDEV_CACHE))
    assert [(e.kind, e.fields["final"], e.fields["reads"], e.fields["hits"], e.fields["size"], e.fields["path"],
             e.fields["vd"]) for e in got] == [("vc", 0, 4, 1, 65536, "/dev/sda", hex(vd))]
    assert feed([f"zfsobs 1 vc_close {2 * ns} pid=3 vd={hex(vd)} gen=0",
                 f"zfsobs 1 vc_id {2 * ns + 5} pool=tank pid=3 vd={hex(vd)} gen=1 size=0 max=16384 bshift=16 "
                 "guid=78 path=/dev/sdb"]) == []
    got = feed(_dump(2 * ns + 10, {(3, vd, 0, "reads"): 1, (3, vd, 0, "declined"): 1, (3, vd, 1, "reads"): 2},
                     VDEV_CACHE))
    assert [(e.ts, e.fields["final"], e.fields["reads"], e.fields["guid"]) for e in got] == \
        [(2 * ns, 1, 5, 77), (2 * ns + 10, 0, 2, 78)]
    got = feed(_dump(3 * ns + 10, {(3, vd, 0, "reads"): 1}, VDEV_CACHE))
    assert [(e.kind, e.fields.get("cause")) for e in got] == [("lost", "late")]


def test_a_late_count_to_a_txg_that_closed_with_none_makes_its_lines():
    """A txg whose only count came after its close (a probe read it open, counted a moment later)
    has no final lines; its late count makes them (zil final=2, the throttle's late=1), never lost."""
    spa, ns = (1 << 64) - 4096, 10**9
    for probe, kind, field, read, check in (("zil", ZIL, "lat_b3", "commits", ("final", 2)),
                                            ("throttle", THROTTLE, "delays", "delays", ("late", 1))):
        sd, parser = SetDumps(probe, 4096), Parser()
        lines = [f"zfsobs 1 set_close {ns} pid=0 spa={hex(spa)} txg=5"] + _dump(2 * ns, {}, kind) + \
            _dump(3 * ns, {(0, spa, 5, field): 1}, kind)
        got = [parser.parse(x) for line in lines for x in sd.feed(line)]
        assert [(e.fields["txg"], e.fields[check[0]], e.fields[read]) for e in got if e.kind in ("zil", "txg_thr")] == \
            [(5, check[1], 1)], probe


def test_an_open_txg_waits_for_its_pools_name_which_outlives_the_pool():
    """A pool is named at its first close (set_pool): an open txg's lines wait for it (never a line
    without its pool's name), then come at the next dump; the final lines of its last txg, made
    after it went, keep its name, and a pool made later at the same address names itself at its
    own first close."""
    spa, ns = (1 << 64) - 4096, 10**9
    sd, parser = SetDumps("zil", 4096), Parser()

    def feed(lines):
        return [parser.parse(x) for line in lines for x in sd.feed(line)]

    assert feed(_dump(ns, {(0, spa, 7, "lat_b3"): 2})) == []
    assert feed(_dump(2 * ns, {(0, spa, 7, "lat_b3"): 1})) == []
    assert feed([f"zfsobs 1 set_pool {2 * ns + 5} pid=0 spa={hex(spa)} pool=tank",
                 f"zfsobs 1 set_close {2 * ns + 5} pid=0 spa={hex(spa)} txg=6"]) == []
    got = feed(_dump(3 * ns, {(0, spa, 7, "lat_b3"): 1}))
    assert [(e.kind, e.fields["pool"], e.fields["txg"], e.fields["final"], e.fields["commits"])
            for e in got if e.kind == "zil"] == [("zil", "tank", 7, 0, 4)]
    assert feed([f"zfsobs 1 set_close {3 * ns + 1} pid=0 spa={hex(spa)} txg=7"]) == []
    got = feed(_dump(4 * ns, {}))
    assert [(e.fields["pool"], e.fields["txg"], e.fields["final"]) for e in got if e.kind == "zil"] == \
        [("tank", 7, 1)]
    feed([f"zfsobs 1 set_pool {5 * ns + 1} pid=0 spa={hex(spa)} pool=other",
          f"zfsobs 1 set_close {5 * ns + 1} pid=0 spa={hex(spa)} txg=0"])
    got = feed(_dump(6 * ns, {(0, spa, 1, "lat_b3"): 1}))
    assert [(e.fields["pool"], e.fields["txg"]) for e in got if e.kind == "zil"] == [("other", 1)]


def test_a_pools_name_outlives_any_number_of_its_txgs():
    """A txg's close is kept with the txg, apart from the pool's name: a long-lived pool (the
    kernel's, a txg every few seconds for days) keeps its name on every line however many txgs close."""
    spa, ns = (1 << 64) - 4096, 10**9
    sd, parser = SetDumps("throttle", 4096), Parser()
    sd.feed(f"zfsobs 1 set_pool 1 pid=0 spa={hex(spa)} pool=tank")
    for t in range(1, set_dumps.KEEP_NOTES + 10):
        sd.feed(f"zfsobs 1 set_close {t * ns} pid=0 spa={hex(spa)} txg={t} dirty_data_max=9 delay_min_pct=60 "
                "delay_scale=500000")
    got = [parser.parse(x) for line in _dump(10**6 * ns, {(0, spa, 10**5, "delays"): 1}, THROTTLE)
           for x in sd.feed(line)]
    got += [parser.parse(x) for x in sd.flush()]
    assert [(e.fields["pool"], e.fields["txg"]) for e in got] == [("tank", 10**5)]
    assert len(sd.closes) == len(sd.done) == set_dumps.KEEP_FINAL     # kept no longer than its txg
