"""Before/after statistics: windows, nearest-rank p99, ratios, the split at tunable changes, the
tuning model, and the per-metric samples the model derives from the other parts."""
import pytest

from zfsobs.events import Parser
from zfsobs.model import Model
from zfsobs.model.samples import BIN_NS, KEEP_NS, Track
from zfsobs.model.segments import between, compare, ratio, split, stat, window_stats
from zfsobs.model.tuning import Change, TuningModel

S = 10**9


def feed(model, *lines):
    p = Parser()
    for line in lines:
        ev = p.parse(line)
        assert ev is not None, line
        model.feed(ev)
    return model


def track(*pairs):
    t = Track()
    for ts, v in pairs:
        t.add(ts, v)
    return t


def test_stat_mean_p99_nearest_rank_and_empty():
    st = stat(list(range(1, 101)))
    assert st == {"n": 100, "mean": 50.5, "p99": 99, "max": 100}
    assert stat(list(range(1, 201)))["p99"] == 198        # rank ceil(0.99 * 200) = 198
    assert stat([5, 1, 3])["p99"] == 5                    # fewer than 100 samples: p99 is the max
    assert stat([]) == {"n": 0, "mean": None, "p99": None, "max": None}


def test_a_sample_at_the_change_belongs_after_it():
    t = track((10, 1.0), (20, 2.0), (30, 3.0), (40, 4.0))
    assert between(t, 0, 30) == [1.0, 2.0]
    assert between(t, 30, 41) == [3.0, 4.0]
    assert between(t, 41, 50) == []
    assert between(t, 0, 10) == []                        # the end is exclusive


def test_track_keeps_time_order_and_prunes():
    t = track((30, 3.0), (10, 1.0), (20, 2.0))
    assert t.ts == [10, 20, 30] and t.values == [1.0, 2.0, 3.0]
    t.prune(20)
    assert t.ts == [20, 30]


def test_ratio_with_zero_or_missing_before():
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(0.0, 0.0) == 1.0         # nothing changed
    assert ratio(1.0, 0.0) is None        # no finite ratio
    assert ratio(1.0, None) is None and ratio(None, 1.0) is None


def test_compare_keeps_keys_of_either_side_or_only_both():
    before = window_stats({"a": track((1, 2.0)), "b": track((1, 5.0))}, 0, 10)
    after = window_stats({"a": track((11, 4.0)), "c": track((12, 1.0))}, 10, 20)
    diff = compare(before, after)
    assert set(diff) == {"a", "b", "c"}
    assert diff["a"]["ratio_mean"] == 2.0 and diff["a"]["ratio_p99"] == 2.0
    assert diff["b"]["after"]["n"] == 0 and diff["b"]["ratio_mean"] is None
    assert set(compare(before, after, both=True)) == {"a"}


def test_split_at_changes():
    c1 = Change(50, "x", 1, 2, 0)
    c2 = Change(80, "y", 3, 4, 0)
    c3 = Change(80, "z", 5, 6, 0)         # seen by the same poll as c2: one boundary
    segs = split(10, 100, [c1, c2, c3])
    assert [(s.start, s.end) for s in segs] == [(10, 50), (50, 80), (80, 101)]
    assert segs[0].opened_by == [] and segs[1].opened_by == [c1] and segs[2].opened_by == [c2, c3]
    assert [(s.start, s.end) for s in split(10, 100, [])] == [(10, 101)]


def test_tuning_model_initial_values_and_changes():
    m = TuningModel()
    feed(m, "zfsobs 1 tunable 100 name=a old=-1 new=10 pid=7 src=mem initial=1",
         "zfsobs 1 tunable 100 name=b old=-1 new=5 pid=7 src=mem initial=1",
         "zfsobs 1 tunable 200 name=a old=10 new=2 pid=7 src=mem since=150",
         "zfsobs 1 tunable 250 name=c new=1 pid=7 src=mem",          # first seen later: not a change
         "zfsobs 1 tunable 300 name=b old=5 new=1 pid=0 src=sysfs")
    assert m.initial == {"a": 10, "b": 5, "c": 1}
    assert m.values == {"a": 2, "b": 1, "c": 1}
    assert m.changes == [Change(200, "a", 10, 2, 7, "mem", 150), Change(300, "b", 5, 1, 0, "sysfs")]
    assert m.latest == m.changes[-1]
    assert m.in_force(199) == {"a": 10, "b": 5, "c": 1}
    assert m.in_force(200) == {"a": 2, "b": 5, "c": 1}
    assert m.opened_at(300) == [m.changes[-1]]


def test_tunable_line_needs_name_and_new():
    p = Parser()
    assert p.parse("zfsobs 1 tunable 1 name=a old=1") is None
    assert p.parse("zfsobs 1 tunable 1 new=3") is None
    assert p.malformed == 2
    assert p.parse("zfsobs 1 tunable 1 name=a new=3").fields == {"name": "a", "new": 3}


def vq(ts, pend, act, pend_ns, act_ns, enq, issued, wait_ns, limit=10, act_max=None):
    return (f"zfsobs 1 vq {ts} pool=p pid=1 vd=0x1 class=3 final=0 pend={pend} act={act} pend_ns={pend_ns} "
            f"act_ns={act_ns} pend_max={pend} act_max={act if act_max is None else act_max} enq={enq} "
            f"enq_bytes=0 issued={issued} merged=0 aggs=0 done={issued - act} done_bytes=0 wait_ns={wait_ns} "
            f"dev_ns=0 untracked=0 untracked_act=0 unseen=0 max_active={limit} min_active=1")


def test_vdev_queue_bins_are_cut_at_a_change():
    """Depth 4 active from t=1 s to the change at 2.5 s, then 2; the bins before the change must
    average exactly 4, the bin after it 2. A limit sample comes from the lines stamped in a bin
    (none in [2, 2.5): the vdev's last line, from before, might be older than a change)."""
    m = Model(keep=None)
    t0 = 1 * S
    feed(m, vq(t0, 0, 4, 0, 0, 4, 4, 0),
         "zfsobs 1 tunable 2500000000 name=zfs_vdev_async_write_max_active old=10 new=2 pid=1 src=mem",
         vq(int(2.5 * S), 0, 2, 0, 4 * int(1.5 * S), 4, 4, 0, limit=2),
         vq(6 * S, 0, 2, 0, 4 * int(1.5 * S) + 2 * int(3.5 * S), 4, 4, 0, limit=2))
    m.samples.settle()
    act = m.samples.tracks[("p", "vq.async_write.act_mean")]
    limit = m.samples.tracks[("p", "vq.async_write.max_active")]
    assert act.ts[:3] == [t0, t0 + BIN_NS, int(2.5 * S)]       # bins: [1, 2), [2, 2.5), [2.5, 3.5) ...
    assert act.values[:3] == pytest.approx([4.0, 4.0, 2.0])
    assert limit.values[:2] == [10, 2] and limit.ts[:2] == [t0, int(2.5 * S)]
    assert between(limit, 0, int(2.5 * S)) == [10]


def test_txg_and_zil_samples_one_per_synced_txg():
    m = Model(keep=None)
    feed(m, "zfsobs 1 hello 0 probe=zil target=libzpool",
         "zfsobs 1 zil 1000 pool=p pid=1 txg=5 cpu=0 final=1 commits=2 lat_ns=3000 nused=100 size=4096",
         "zfsobs 1 txg 5000 pool=p pid=1 txg=5 start=1000 sync_ns=4000 interval_ns=-1 dirty=77",
         "zfsobs 1 txg 9000 pool=p pid=1 txg=6 start=6000 sync_ns=3000 interval_ns=5000 dirty=-1")
    m.samples.settle()
    t = m.samples.tracks
    assert t[("p", "txg.sync_ns")].values == [4000, 3000]
    assert t[("p", "txg.interval_ns")].ts == [9000] and t[("p", "txg.dirty_bytes")].ts == [5000]
    assert t[("p", "zil.commits")].values == [2, 0]            # txg 6 had no ZIL activity
    assert t[("p", "zil.nused_bytes")].values == [100, 0]
    assert t[("p", "zil.lat_mean_ns")].values == [1500]        # no latency sample for an idle txg


def test_live_model_keeps_the_last_ten_minutes():
    m = Model()
    lines = [f"zfsobs 1 txg {i * S} pool=p pid=1 txg={i} start={i * S - 100} sync_ns=100" for i in range(1, 701)]
    feed(m, *lines)
    ts = m.samples.tracks[("p", "txg.sync_ns")].ts
    assert ts[-1] == 700 * S and ts[0] >= 700 * S - KEEP_NS - BIN_NS
