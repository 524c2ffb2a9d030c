"""Where a time the user gives lands in a capture (zfsobs/views/goto.py: `replay --at`, the g key),
on the real lab capture's own clock anchor; bad times are one line."""
from __future__ import annotations

import time

import pytest

from conftest import recorded_capture
from test_cli import one_line_error, run
from zfsobs.capture import read_capture
from zfsobs.errors import ZfsobsError
from zfsobs.views import goto
from zfsobs.views.replay import Replayer

SEC = 10**9


@pytest.fixture(scope="module")
def rp():
    return Replayer(read_capture(recorded_capture()))


def local(rp, ts: int) -> time.struct_time:
    meta = rp.capture.meta
    return time.localtime((meta["start_wall_ns"] + ts - meta["start_mono_ns"]) / 1e9)


def test_offsets_count_from_the_first_event(rp):
    for text, seconds in (("+0", 0), ("+12", 12), ("+12.5s", 12.5), ("+0m31s", 31), ("+0.5m", 30)):
        assert goto.parse(text, rp.capture.meta, rp.start, rp.end) == rp.start + int(seconds * SEC), text


def test_clock_times_go_through_the_capture_anchor(rp):
    at = rp.start + 20 * SEC
    t = local(rp, at)
    hms = time.strftime("%H:%M:%S", t)
    ts = goto.parse(hms, rp.capture.meta, rp.start, rp.end)
    assert at - SEC < ts <= at and time.strftime("%H:%M:%S", local(rp, ts)) == hms
    assert goto.parse(time.strftime("%Y-%m-%d ", t) + hms, rp.capture.meta, rp.start, rp.end) == ts
    assert goto.parse(time.strftime("%Y-%m-%dT", t) + hms, rp.capture.meta, rp.start, rp.end) == ts


@pytest.mark.parametrize("text,why", [("soon", "not a time (give +1h30m"), ("+1h", "not in the capture, which runs from"),
                                      ("25:00", "not a time of day"), ("+-3", "not a time"),
                                      ("2001-01-01 00:00", "not in the capture")])
def test_bad_times_say_what_is_wrong(rp, text, why):
    with pytest.raises(ZfsobsError, match=why.replace("(", r"\(").replace("+", r"\+")):
        goto.parse(text, rp.capture.meta, rp.start, rp.end)


def test_offsets_print_as_they_are_typed():
    assert [goto.clock_offset(s * SEC) for s in (0, 42, 1503, 5400, 187200)] == \
        ["0s", "42s", "25m03s", "1h30m00s", "2d04h00m00s"]


def test_g_then_a_time_and_enter_goes_there_and_a_bad_one_says_why():
    rp = Replayer(read_capture(recorded_capture()))
    rp.seek(rp.start)
    for key in "g+20s\n":
        assert rp.key(key)
    assert rp.cursor == rp.start + 20 * SEC and rp.status.paused and rp.status.prompt is None
    for key in "g+9q\x7fh\n":             # q is typed, not quit; backspace takes it back
        assert rp.key(key)
    assert rp.cursor == rp.start + 20 * SEC and "+9h: not in the capture" in rp.status.message
    for key in "gx\x1b":                   # Esc leaves the prompt where it was
        rp.key(key)
    assert rp.status.prompt is None and rp.cursor == rp.start + 20 * SEC


def test_replay_at_in_line_mode_starts_there_and_a_bad_at_is_one_line():
    whole = run("replay", recorded_capture())
    later = run("replay", "--at", "+20s", recorded_capture())
    assert whole.returncode == later.returncode == 0, later.stderr
    rows, tail = whole.stdout.splitlines(), later.stdout.splitlines()
    assert rows[0] == tail[0] and 1 < len(tail) < len(rows) and rows[-len(tail) + 1:] == tail[1:]
    one_line_error(run("replay", "--at", "tomorrow", recorded_capture()), "tomorrow: not a time")
