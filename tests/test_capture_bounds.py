"""The reader's and the reports' bounds (docs/capture.md, "Bounds"), each against the hostile file
that had no bound before (tests/fuzz_reproducers.py): the capture's data up to the bound is kept
and the report says what it skipped."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from fuzz_reproducers import HEAD, TRAILER, _lines, equal_ts, far_apart, packed_bomb, resync, text_bomb
from zfsobs import events
from zfsobs.capture import read_capture
from zfsobs.capture.format import MAX_DEPTH, as_json
from zfsobs.errors import ZfsobsError
from zfsobs.events import INT_RANGE, Parser, parse_all
from zfsobs.views import compare, report

TXG = "zfsobs 1 txg {ts} pool=p txg={n} start=0 sync_ns=1"


def cap_of(tmp_path, data: bytes):
    path = tmp_path / "c.cap"
    path.write_bytes(data)
    return read_capture(str(path))


def zfsobs(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "zfsobs", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("make", [packed_bomb, text_bomb], ids=["packed", "text"])
def test_a_record_past_the_bounds_is_skipped_and_said_and_the_rest_kept(tmp_path, make):
    good = _lines(b"E", 1, 7, 7, (TXG.format(ts=7, n=1) + "\n").encode())
    data = make()
    cap = cap_of(tmp_path, data[:-len(TRAILER)] + good + TRAILER)
    out = report.as_dict(cap)
    assert out["meta"]["events"] == 1 and len(out["txgs"]) == 1
    assert any("16 MiB or 131072 lines, skipped" in w for w in out["meta"]["warnings"])
    assert "131072 lines, skipped" in report.render(cap, "text")


def test_resync_over_false_record_heads_is_linear_and_says_what_it_did_not_search(tmp_path):
    """Heads every 11 bytes, each claiming a body to the end of the file: on main each was CRC'd
    over that length (512 KiB: 6.4 s, 4 MiB would be ~7 min); now the work is 8 times the file."""
    path = tmp_path / "r.cap"
    path.write_bytes(resync(4 << 20))
    t = time.monotonic()
    cap = read_capture(str(path))
    assert time.monotonic() - t < 60
    assert any("not searched for records" in w for w in cap.warnings)
    assert cap.meta["format"] == "zfsobs-capture"


def test_events_of_one_ts_are_not_all_held(tmp_path):
    """On main every event of equal ts waited for the end: 800k events, 248 MB."""
    cap = cap_of(tmp_path, equal_ts())
    stream = cap.events(Parser(), digests=False)
    for n, ev in enumerate(stream, 1):
        assert len(stream.pending) <= 40_000       # at most one record's
    assert n == 800_000 and not any("order" in w for w in cap.warnings)


def test_a_record_claiming_an_earlier_time_does_not_hold_everything(tmp_path, monkeypatch):
    monkeypatch.setattr(events, "HOLD", 100)
    body = "".join(TXG.format(ts=1000 + i, n=i) + "\n" for i in range(50)).encode()
    liar = _lines(b"E", 99, 0, 0, (TXG.format(ts=5000, n=999) + "\n").encode())   # says ts 0, brings 5000
    cap = cap_of(tmp_path, HEAD + b"".join(_lines(b"E", i, 1000, 2000, body) for i in range(10)) + liar + TRAILER)
    stream = cap.events(Parser(), digests=False)
    most = 0
    for ev in stream:
        most = max(most, len(stream.pending))
    assert most <= 150
    assert any("passed on before their time order was certain" in w for w in cap.warnings)
    assert report.as_dict(cap)["meta"]["events"] == 501


def test_ordered_is_still_exact():
    lines = [TXG.format(ts=ts, n=i) for i, ts in enumerate([5, 3, 3, 9, 1, 3, 5] * 50)]
    got = [(e.ts, e.fields["txg"]) for e in events.iter_sorted(lines, Parser(), chunk=3)]
    assert got == sorted(got, key=lambda x: x[0]) and got == [(e.ts, e.fields["txg"]) for e in
                                                            sorted(parse_all(lines, Parser()), key=lambda e: e.ts)]


def test_openmetrics_refuses_more_points_than_its_cap_in_one_line(tmp_path):
    path = tmp_path / "far.cap"
    path.write_bytes(far_apart())
    for step in ("15", "0.000001"):
        p = zfsobs("report", str(path), "--format", "openmetrics", "--step", step)
        assert p.returncode == 2 and p.stdout == ""
        assert p.stderr.strip().splitlines() == [p.stderr.strip()] and "more than 250000 points" in p.stderr


def test_compare_steps_over_years_of_silence(tmp_path):
    """On main: one bin per second of the 31 years between the two lines, for ever."""
    path = tmp_path / "far.cap"
    path.write_bytes(far_apart("vq"))
    p = zfsobs("report", str(path), "--compare", "--format", "json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["meta"]["duration_s"] == 1e9


@pytest.mark.parametrize("value", [str(INT_RANGE), "18446744073709551615", "9" * 400, str(-INT_RANGE)])
def test_an_integer_past_the_range_makes_its_line_malformed(value):
    parser = Parser()
    assert parser.parse(f"zfsobs 1 txg 5 pool=p txg=1 start=1 sync_ns={value}") is None
    assert parser.parse(f"zfsobs 1 txg {value} pool=p txg=1 start=1 sync_ns=1") is None
    assert parser.parse(f"zfsobs 1 other 5 x={value}") is None
    assert parser.malformed == 3
    assert parser.parse(f"zfsobs 1 txg 5 pool=p txg=1 start=1 sync_ns={INT_RANGE - 1}").fields["sync_ns"] == INT_RANGE - 1


def test_a_header_integer_past_the_range_is_left_out(tmp_path):
    from zfsobs.capture.format import FILE_MAGIC, _FILE_HEAD, deflate, record
    head = json.dumps({"format": "zfsobs-capture", "version": 3, "start_wall_ns": 10**30, "start_mono_ns": 0})
    cap = cap_of(tmp_path, _FILE_HEAD.pack(FILE_MAGIC, 3) + record(b"H", deflate(head.encode()))
                 + _lines(b"E", 0, 5, 5, (TXG.format(ts=5, n=1) + "\n").encode()) + TRAILER)
    assert "start_wall_ns" not in cap.meta and any("start_wall_ns" in w for w in cap.warnings)
    compare.render(cap, "text")


def test_json_nested_past_the_depth_is_damage():
    def nest(n):
        return "[" * n + "]" * n
    assert as_json('{"a": %s}' % nest(MAX_DEPTH - 1)) is not None
    assert as_json('{"a": %s}' % nest(MAX_DEPTH)) is None
    assert as_json('{"a": %s}' % nest(100_000)) is None      # main: RecursionError


def test_report_refuses_what_is_not_a_regular_file_at_once(tmp_path):
    """On main `report FIFO` blocked for ever in open()."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    os.mkdir(tmp_path / "dir")
    for path, what in ((fifo, "a FIFO"), ("/dev/zero", "a device"), (tmp_path / "dir", "a directory")):
        p = zfsobs("report", str(path), timeout=30)
        assert p.returncode == 2 and p.stderr == f"zfsobs: {path}: is {what}, not a capture (a regular file)\n"
    with pytest.raises(ZfsobsError, match="FIFO"):
        read_capture(str(fifo))
    real = tmp_path / "real.cap"
    real.write_bytes(far_apart())
    (tmp_path / "link.cap").symlink_to(real)
    assert zfsobs("report", str(tmp_path / "link.cap")).returncode == 0
    (tmp_path / "fifo-link").symlink_to(fifo)
    assert "is a FIFO" in zfsobs("report", str(tmp_path / "fifo-link"), timeout=30).stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
