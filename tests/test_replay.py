"""Replay's model is a pure function of the events up to the cursor, however it got there: played
forward, stepped back through a kept state, or rewound (zfsobs/views/replay.py). On the real lab
capture, written again as format 2 (and as recorded, format 1)."""
from __future__ import annotations

import io
import os

import pytest
from rich.console import Console

from conftest import recorded_capture
from test_capture_digest import rewrite
from zfsobs.capture import read_capture
from zfsobs.events import Parser
from zfsobs.views import far_seek
from zfsobs.views.replay import Replayer
from zfsobs.views.screen import Fit, render_screen

SEC = 10**9


def screen(rp: Replayer) -> str:
    console = Console(file=io.StringIO(), width=200, height=60, record=True, color_system=None)
    console.print(render_screen(rp.model, rp.status, 60, rp.cursor, Fit()))
    return console.export_text()


@pytest.fixture(scope="module", params=["format 1", "format 2"])
def capture(request, tmp_path_factory):
    if request.param == "format 1":
        return recorded_capture()
    path = tmp_path_factory.mktemp("replay") / "x.cap"
    rewrite(recorded_capture(), path, 40, 3)
    return str(path)


def test_a_step_back_shows_what_playing_to_there_shows(capture):
    rp = Replayer(read_capture(capture), snap_ns=2 * SEC)
    assert rp.end - rp.start > 10 * SEC
    cursor = rp.start
    while cursor < rp.end:                     # played forward a second at a time, as the screen does
        cursor += SEC
        rp.seek(cursor)
    assert len(rp.snaps) >= 3
    for back in (rp.start + 7 * SEC + 123, rp.end - 3 * SEC, rp.start + 2):
        rp.seek(back)
        fresh = Replayer(read_capture(capture))
        fresh.seek(back)
        assert fresh.model.events == rp.model.events and fresh.parser.malformed == rp.parser.malformed
        assert screen(rp) == screen(fresh)
        rp.seek(rp.end)                          # and forward again from the kept state
    assert rp.model.events == rp.parser.events and rp.next is None


def test_the_end_is_the_last_event_and_rewind_starts_over(capture):
    cap = read_capture(capture)
    rp = Replayer(cap)
    rp.seek(rp.end)
    assert rp.next is None and rp.model.last_ts == rp.end
    rp.seek(rp.start)
    first = [ev for ev in read_capture(capture).events(Parser(), digests=False) if ev.ts <= rp.start]
    assert rp.model.events == len(first) > 0


def test_over_budget_the_kept_states_thin_out_away_from_the_cursor(capture, monkeypatch):
    """A day of states does not fit the budget: the ones just behind the cursor stay a snap apart
    (a step back feeds at most that again) and the gaps widen towards the start."""
    rp = Replayer(read_capture(capture), snap_ns=SEC // 2)
    rp.seek(rp.end)
    one = max(map(len, rp.snaps.values()))         # states grow as the model fills
    monkeypatch.setattr("zfsobs.views.replay.SNAP_BUDGET", 6 * one)
    rp = Replayer(read_capture(capture), snap_ns=SEC // 2)
    cursor = rp.cursor
    while cursor < rp.end:
        cursor += SEC // 4
        rp.seek(cursor)
    keys = sorted(rp.snaps)
    gaps = [b - a for a, b in zip(keys, keys[1:])]
    assert len(keys) >= 3 and sum(map(len, rp.snaps.values())) <= 6 * one
    assert gaps[-1] <= SEC and gaps[0] > 2 * gaps[-1], gaps
    back = rp.end - SEC // 2
    kept = len(rp.snaps)
    rp.seek(back)
    rp.seek(rp.end)                  # played again over a kept stretch: no second state for it
    assert len(rp.snaps) == kept
    rp.seek(back)
    fresh = Replayer(read_capture(capture))
    fresh.seek(back)
    assert screen(rp) == screen(fresh)


def kept_samples(rp) -> dict:
    """The samples the tuning panel and compare would read at the cursor (past the last prune's
    second, which depends on the events' spacing)."""
    from zfsobs.model import samples
    since = rp.cursor - samples.KEEP_NS + SEC
    return {key: [(t, v) for t, v in zip(tr.ts, tr.values) if t >= since]
            for key, tr in rp.model.samples.tracks.items()}


def shrink(monkeypatch) -> None:
    """The model's 10 minutes of history cut to 4 s, the screen's minute to 2 s and its seconds to
    1 s, seek distances with them: the real captures here are a minute or two."""
    from zfsobs.model import samples, vdev_cache, vdev_queue, zil
    from zfsobs.views import replay
    for module, name in ((samples, "KEEP_NS"), (vdev_queue, "KEEP_NS"), (vdev_cache, "KEEP_NS"),
                         (zil, "FLOW_KEEP_NS")):
        monkeypatch.setattr(module, name, 4 * SEC)
    monkeypatch.setattr(replay, "FAR_NS", 3 * SEC)
    monkeypatch.setattr("zfsobs.model.KEEP_NS", 4 * SEC)
    monkeypatch.setattr(replay, "BACK_NS", 2 * SEC)
    # the txg and ZIL panels' minute of rows to 2 s (the prefix keeps a pool's last 4 s of rows),
    # and the rates' 5 s to 1 s: a short seek's lines are less than the panels' rows
    monkeypatch.setattr("zfsobs.model.txg.WINDOW_NS", 2 * SEC)
    monkeypatch.setattr("zfsobs.views.zil_panel.WINDOW_NS", 2 * SEC)
    monkeypatch.setattr("zfsobs.views.zil_panel.RATE_NS", SEC)
    monkeypatch.setattr("zfsobs.model.RATE_WINDOW_NS", SEC)


def played(path, target: int, monkeypatch) -> Replayer:
    """A replay that fed every line up to `target`."""
    from zfsobs.views import replay
    fresh = Replayer(read_capture(str(path)))
    with monkeypatch.context() as m:
        m.setattr(replay, "FAR_NS", 10**15)
        fresh.seek(target)
    assert fresh.before is None
    return fresh


@pytest.mark.parametrize("index", [False, True], ids=["from the start", "from the index"])
@pytest.mark.parametrize("cut", ["full", "short"])
def test_a_far_seek_reads_the_digests_and_shows_what_playing_there_shows(tmp_path, monkeypatch, cut, index):
    """A seek far past what was played feeds the digests up to the model's history before the
    target and every line after (zfsobs/views/replay.py): the screen is the one a full replay shows,
    there and at every step back or forward from it. The real lab capture is 37 s, so the history the
    model keeps (10 min) is cut to 4 s here (shrink()). Full: the lines of the whole history, and the
    samples kept are a full replay's too; short (this capture has no tunable change): the lines of
    the screen's own windows only (1 s here). From the index: the way to the cut read from the
    latest point the seek index kept before it (zfsobs/views/seek_index.py), built first."""
    from zfsobs.views import replay
    shrink(monkeypatch)
    if cut == "full":
        monkeypatch.setattr(replay, "screen_horizon", replay.horizon)
    assert replay.screen_horizon() == (4 if cut == "full" else 1) * SEC
    skipped = []
    monkeypatch.setattr(far_seek.Prefix, "kept", lambda self, kept=far_seek.Prefix.kept:
                        skipped.append(self.skipped()) or kept(self))
    path = tmp_path / "x.cap"
    rewrite(recorded_capture(), path, 40, 3)
    cap = read_capture(str(path))
    assert len(cap.digests) >= 20
    rp = Replayer(cap, snap_ns=SEC)
    started = []
    monkeypatch.setattr(rp.index, "start", lambda stream, cut, start=rp.index.start:
                        started.append(start(stream, cut)) or started[-1])
    if index:
        rp.index.build()
        assert len(rp.index.points) >= 10
    for target in (rp.start + 20 * SEC + 7, rp.start + 29 * SEC, rp.start + 18 * SEC + 5, rp.end - SEC):
        rp.seek(target)
        assert rp.before is not None and rp.before < target      # the digests were read on the way
        fresh = played(path, target, monkeypatch)
        assert fresh.model.events == rp.model.events
        assert screen(rp) == screen(fresh), target
        assert (rp.short_until > 0) == (cut == "short")
        if cut == "full":
            assert kept_samples(rp) == kept_samples(fresh) and kept_samples(rp), target
        for step in (SEC, -SEC, -2 * SEC):                      # steps around it keep the same screen
            rp.seek(target + step)
            fresh.seek(target + step)
            assert screen(rp) == screen(fresh), (target, step)
    assert skipped and min(skipped) > 0         # of the way there, not every event was fed
    assert started and all((p is not None) == index for p in started), started


def test_a_short_far_seek_goes_in_full_where_the_tuning_panel_reads_a_change(tmp_path, monkeypatch):
    """The kernel lab's awqset capture (tests/data: a real sysfs change of
    zfs_vdev_async_write_max_active mid-run). A far seek reads only the screen's own window of lines
    unless a tunable change lies in the model's history before the target or a step back from it:
    then the tuning panel reads the samples before the change, and the seek is made in full, whether
    the change is found on the way (the prefix), in the lines after the short cut, or later while
    playing on from a short seek. The screen is a full replay's at every target and step."""
    from zfsobs.views import replay
    shrink(monkeypatch)
    seeks = []
    monkeypatch.setattr(Replayer, "_far", lambda self, ts, short=True, far=Replayer._far:
                        seeks.append(short) or far(self, ts, short))
    path = tmp_path / "x.cap"
    rewrite(os.path.join(os.path.dirname(recorded_capture()), "awqset-2.4.4.cap"), path, 20, 2)
    cap = read_capture(str(path))
    assert len(cap.digests) >= 20
    changes = [ev.ts for ev in cap.events(Parser(), digests=False) if ev.kind == "tunable" and not ev.get("initial")]
    assert len(changes) == 1
    change = changes[0]

    def check(rp, target, short: bool):
        fresh = played(path, target, monkeypatch)
        assert screen(rp) == screen(fresh), (target - change) / SEC
        assert fresh.model.events == rp.model.events
        assert (rp.short_until > 0) == short, (target - change) / SEC
        assert ("zfs_vdev_async_write_max_active" in screen(rp)) == (target >= change)

    # (seconds from the change, whether the seek stays short): the change between the short cut
    # and the target, in the prefix within the history, older than the history, not yet come
    for offset, short, index in ((2, False, False), (5, False, False), (20, True, False), (-10, True, False),
                                 (2, False, True), (5, False, True), (20, True, True), (-10, True, True)):
        rp = Replayer(read_capture(str(path)), snap_ns=SEC)
        if index:                # the way there from the seek index's points (zfsobs/views/seek_index.py)
            rp.index.build()
            assert rp.index.points
        seeks.clear()
        rp.seek(change + offset * SEC)
        assert seeks[0] is True and seeks[-1] is short, (offset, seeks)
        check(rp, change + offset * SEC, short)
    # short just before the change, then played on over it: made again in full there; steps back
    rp = Replayer(read_capture(str(path)), snap_ns=SEC)
    seeks.clear()
    rp.seek(change - SEC // 2)
    check(rp, change - SEC // 2, True)
    for step in (SEC, SEC, -SEC, -SEC, 3 * SEC):
        rp.seek(rp.cursor + step)
        check(rp, rp.cursor, rp.cursor < change and rp.short_until > 0)
    assert seeks[:2] == [True, False], seeks
