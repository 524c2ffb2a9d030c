"""What a far seek feeds of the way to its cut (zfsobs/views/far_seek.py), event by event. The screen
equality on the real lab capture is tests/test_replay.py's; this pins the rules it rests on where
that 37 s capture has no case: a pool idle long before the cut, a vdev freed and its address used
again, and the order events are fed in."""
from __future__ import annotations

from zfsobs.events import Event
from zfsobs.views import far_seek

SEC = 10**9


def ev(kind_: str, t: float, **fields) -> Event:
    return Event(kind_, int(t * SEC), fields)


def test_a_pool_keeps_its_last_rows_however_long_ago_and_counters_their_last_line(monkeypatch):
    monkeypatch.setattr("zfsobs.model.txg.WINDOW_NS", 10 * SEC)
    monkeypatch.setattr("zfsobs.views.zil_panel.WINDOW_NS", 5 * SEC)
    prefix = far_seek.Prefix()
    events = [ev("hello", 0, probe="txg")]
    events += [ev("txg", t, pool="idle", txg=t) for t in range(0, 101)]           # stops at 100 s
    events += [ev("txg", t, pool="busy", txg=t) for t in range(0, 301)]
    events += [ev("zil", t + 0.5, pool="busy", txg=t, cpu=0) for t in range(0, 301)]
    events += [ev("txg_thr", 3, pool="busy", txg=3)]
    events += [ev("tunable", 150, name="zfs_txg_timeout", old=5, new=1)]
    # one vdev address: lines, its free (final), then a new vdev_t there
    events += [ev("vq", t, pid=7, vd="0xa", **{"class": c}) for t in range(1, 51) for c in (0, 3)]
    events += [ev("vq_lat", t, pid=7, vd="0xa", kind=0, **{"class": 3}) for t in range(1, 51)]
    events += [ev("vq_vdev", 60, pid=7, vd="0xa", final=1)]
    events += [ev("vq_vdev", 70, pid=7, vd="0xa", final=0), ev("vq", 70, pid=7, vd="0xa", **{"class": 0}),
               ev("vq", 80, pid=7, vd="0xa", **{"class": 0})]
    events += [ev("vc", t, pid=7, vd="0xb", final=0) for t in range(1, 40)]
    events.sort(key=lambda e: e.ts)
    for e in events:
        prefix.add(e)
    kept = list(prefix.kept())
    assert [e.ts for e in kept] == sorted(e.ts for e in kept)          # fed in the order they came
    rows = lambda kind, pool: [e.ts // SEC for e in kept if e.kind == kind and e.fields["pool"] == pool]
    # each pool's last 2 x the longer panel window (20 s) before its own newest row (busy: 300.5 s)
    assert rows("txg", "idle") == list(range(80, 101))
    assert rows("txg", "busy") == list(range(281, 301)) and rows("zil", "busy") == list(range(280, 301))
    assert rows("txg_thr", "busy") == [] and prefix.throttle_seen     # left behind, but said
    assert [e.kind for e in kept if e.kind in ("hello", "tunable")] == ["hello", "tunable"]
    # the vdev's latest incarnation only: its first line after the free and each series' last
    vq = [(e.kind, e.ts // SEC, e.fields.get("class")) for e in kept if e.kind.startswith("vq")]
    assert vq == [("vq_vdev", 70, None), ("vq", 80, 0)]
    assert [e.ts // SEC for e in kept if e.kind == "vc"] == [39]
    assert prefix.first_ts == 0 and prefix.skipped() == len(events) - len(kept)


def test_a_final_line_with_nothing_after_it_is_kept():
    """A vdev freed before the cut: its final line tells the model the incarnation ended."""
    prefix = far_seek.Prefix()
    for e in (ev("vc", 1, pid=1, vd="0x1", final=0), ev("vc", 2, pid=1, vd="0x1", final=1)):
        prefix.add(e)
    assert [(e.ts, e.fields["final"]) for e in prefix.kept()] == [(2 * SEC, 1)]


def test_a_peeked_digest_line_names_its_series_as_the_parser_does():
    """The far seek reads the digests' lines only this far (zfsobs/capture/reader.py, Peeked): on every
    counter line of the real lab capture, the time and the fields Prefix keys on are the parser's."""
    from conftest import recorded_capture
    from zfsobs.capture import read_capture
    from zfsobs.capture.digest import digestible
    from zfsobs.capture.reader import _peek
    from zfsobs.events import Parser
    parser, seen = Parser(), 0
    for line in read_capture(recorded_capture()).lines:
        full = parser.parse(line)
        if full is None or not digestible(full):
            continue
        peeked = _peek(line)
        assert (peeked.kind, peeked.ts) == (full.kind, full.ts), line
        for name in ("pid", "vd", "class", "kind", "final"):
            assert peeked.fields.get(name) == full.fields.get(name), (name, line)
        assert parser.parse(peeked.raw) == full
        seen += 1
    assert seen > 1000


def test_a_kept_txg_keeps_its_throttle_lines_however_long_its_sync(monkeypatch):
    """bpftrace's txg_thr line comes as a sync starts, the txg line as it ends: a sync longer than
    the rows kept (the kernel lab's awqset capture, with the windows shrunk, had one) keeps its
    throttle line with its row; one whose row comes after the cut is kept for it, the newest
    PENDING of those as the txg model holds them; one whose row was left behind goes with it."""
    monkeypatch.setattr("zfsobs.model.txg.WINDOW_NS", 5 * SEC)
    monkeypatch.setattr("zfsobs.views.zil_panel.WINDOW_NS", 5 * SEC)
    prefix = far_seek.Prefix()
    events = [ev("txg_thr", 1, pool="p", pid=1, txg=1), ev("txg", 2, pool="p", pid=1, txg=1),
              ev("txg_thr", 3, pool="p", pid=1, txg=2), ev("txg", 60, pool="p", pid=1, txg=2),    # a 57 s sync
              ev("txg", 61, pool="p", pid=1, txg=3), ev("txg_thr", 61.1, pool="p", pid=1, txg=3)]  # row first
    events += [ev("txg_thr", 62 + i / 100, pool="p", pid=1, txg=4 + i) for i in range(far_seek.PENDING + 5)]
    for e in events:
        prefix.add(e)
    kept = [(e.kind, e.fields["txg"]) for e in prefix.kept()]
    assert kept[:4] == [("txg_thr", 2), ("txg", 2), ("txg", 3), ("txg_thr", 3)], kept
    assert [t for k, t in kept[4:]] == list(range(9, 4 + far_seek.PENDING + 5)), kept
    assert prefix.skipped() == len(events) - len(kept)
