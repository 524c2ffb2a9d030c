"""The recording window (issue 42, item 3; zfsobs/sources/window.py): every probe records the same
span. A probe that attached first recorded while the others attached (the kernel lab: minutes of
it, so `record --duration 60` made a 277 s capture); its data lines from before the last probe's
hello are left out and counted, each hello carries the window's start, the duration counts from
there, and the probes' last lines (bye, END) carry the stop's time. No root, no bpftrace: a source
whose second probe attaches late on purpose."""
from __future__ import annotations

import re
import time

import pytest

from zfsobs.capture import read_capture
from zfsobs.events import Parser
from zfsobs.sources.bpftrace import BpftraceSource
from zfsobs.sources.window import Window, restamp, ts_of

S = 10**9
LEAD_S = 3.0          # how long before the second probe the first one attached
PRE = 30              # the first probe's data lines before the second attached (one arrives after)


def txg(ts: int, n: int) -> str:
    return f"zfsobs 1 txg {ts} pool=p txg={n} start={ts - 1000} sync_ns=1000"


class LateSource:
    """Probe `a` attached LEAD_S before probe `b`, and printed data meanwhile; after both, a data
    line a second, and one of `a`'s lines from before `b`'s hello, late through its pipe."""
    tracer, unavailable, pids, ended, dropped_at_stop = "fake", {}, {}, "", 0

    def __init__(self, target):
        self.target = target
        now = time.monotonic_ns()
        self.t0, self.t1 = now - int(LEAD_S * S), now - S // 10
        self.meta = {"source": "fake", "target": {"kind": "libzpool", "path": "/fake"}, "tunables": {},
                     "probes": {"a": {}, "b": {}}, "start_mono_ns": self.t0 - S}
        self.calls, self.attached, self.n = 0, False, 0

    def start(self):
        return self

    def poll(self, timeout):
        self.calls += 1
        if self.calls == 1:
            step = (self.t1 - self.t0) // (PRE + 1)
            return [f"zfsobs 1 hello {self.t0} probe=a target=libzpool"] + \
                   [txg(self.t0 + step * (i + 1), i) for i in range(PRE - 1)]
        if self.calls == 2:
            self.attached = True
            return [f"zfsobs 1 hello {self.t1} probe=b target=libzpool"]
        if self.calls == 3:
            return [txg(self.t1 - 5, PRE - 1)]       # stamped before the window, read after it began
        time.sleep(min(timeout, 0.2))
        self.n += 1
        return [txg(time.monotonic_ns(), PRE + self.n)]

    def finish(self):
        return [f"zfsobs 1 bye {time.monotonic_ns()} probe=a", f"zfsobs 1 bye {time.monotonic_ns()} probe=b"]

    def close(self):
        pass


@pytest.fixture
def late_session(session_with_source):
    made = []
    session_with_source(lambda target: made.append(LateSource(target)) or made[-1])
    return made


def test_every_probe_records_the_same_window(late_session, tmp_path, capsys):
    from zfsobs import cli
    cap = str(tmp_path / "x.cap")
    duration = 2.0
    assert cli.main(["record", "-O", cap, "--target", "fake", "--duration", str(duration)]) == 0
    # the summary says the window's length apart from the whole run's, and what was left out
    done = capsys.readouterr().err.strip().splitlines()[-2]
    m = re.match(r"zfsobs: recorded \d+ events .* in ([\d.]+) s \(([\d.]+) s with the probes' start and stop\) "
                 rf"to .*; stopped: duration reached; {PRE} lines from before every probe had attached left out$", done)
    assert m and duration <= float(m[1]) < duration + 1, done
    source = late_session[0]
    got = read_capture(cap)
    parser = Parser()
    events = [ev for ev in map(parser.parse, got.lines) if ev is not None]
    assert got.meta["window"] == {"start_mono_ns": source.t1, "attached_mono_ns": {"a": source.t0, "b": source.t1}}
    assert got.trailer["before_window"] == PRE, got.trailer
    # nothing from before the window: each hello carries its start, no data line precedes it
    assert [ev.ts for ev in events if ev.kind == "hello"] == [source.t1, source.t1]
    assert min(ev.ts for ev in events) == source.t1
    data = [ev for ev in events if ev.kind == "txg"]
    assert data and all(ev.ts >= source.t1 for ev in data)
    # the duration counts from the window's start (the loop's tick of slack; 3 s more before)
    span = (max(ev.ts for ev in events) - source.t1) / S
    assert duration - 0.1 <= span < duration + LEAD_S / 2, span


def test_the_window_starts_at_the_last_hello_on_the_monotonic_clock():
    now = time.monotonic_ns()
    lines = [f"zfsobs 1 hello {now - 5 * S} probe=txg", txg(now - 4 * S, 1), f"zfsobs 1 hello {now - S} probe=zil"]
    window = Window(lines, source_start_ns=now - 6 * S, now_ns=now)
    assert window.start_ns == now - S and window.attached == {"txg": now - 5 * S, "zil": now - S}
    assert [ts_of(line) for line in window.restamped(lines)] == [now - S, now - 4 * S, now - S]
    assert window.deadline(10) == (now - S) / 1e9 + 10
    # hellos on another clock (far outside the source's run): no window, the duration from the attach
    other = Window([f"zfsobs 1 hello {now * 3} probe=txg"], source_start_ns=now - S, now_ns=now)
    assert other.start_ns is None and other.deadline(10) == now / 1e9 + 10
    assert other.restamped(["zfsobs 1 hello 5 probe=txg"]) == ["zfsobs 1 hello 5 probe=txg"]


def test_a_probes_last_lines_carry_the_stops_time():
    """bye and END's lines (read after the stop) carry the stop's time; a line a probe printed while
    bpftrace detached it is dropped, as before."""
    source = object.__new__(BpftraceSource)
    source._runtime()
    stop = source._stop_ns = 10 * S
    late = [txg(stop - 5, 1), txg(stop + S, 2), f"zfsobs 1 bye {stop + 6 * S} probe=zil",
            f"zfsobs 1 zil {stop + 6 * S} pool=p txg=3 cpu=0 final=0"]
    kept = source._trusted(late)
    assert [ts_of(line) for line in kept] == [stop - 5, stop, stop]
    assert kept[1:] == [restamp(late[2], stop), restamp(late[3], stop)] and source.dropped_at_stop == 1
