"""SIGTERM and SIGINT at any moment of a recording: every line handed to the capture before the
signal is in the file exactly once, and the trailer is written. Real signals, sent by a timer
thread at random moments while the main thread adds and flushes (a flush every 40 lines makes
most of the time fall inside a flush, where a signal once lost the buffer it had just taken)."""
from __future__ import annotations

import os
import random
import signal
import threading

from conftest import streams
from zfsobs.capture import CaptureWriter, read_capture
from zfsobs.signals import Terminated, raise_on_termination, restore_defaults

CASES = 300


def line(i: int) -> str:
    return f"zfsobs 1 txg {1000 + i} pool=p pid=1 txg={i} start=1 sync_ns=1 interval_ns=1 dirty=1"


def record_until_signalled(path, sig: int, delay: float) -> int:
    """Add lines until the signal lands; the number of add() calls begun."""
    writer = CaptureWriter(str(path), {"source": "test"})
    timer = threading.Timer(delay, os.kill, (os.getpid(), sig))
    begun = 0
    try:
        timer.start()       # inside the try: a loaded machine may deliver the signal at once
        while True:
            begun += 1
            writer.add(line(begun - 1))
            if begun % 40 == 0:
                writer.flush()
    except (Terminated, KeyboardInterrupt):
        pass
    finally:
        timer.join()
    writer.close({"reason": "signalled"})
    return begun


def test_no_line_is_lost_or_repeated_whenever_a_signal_lands(tmp_path):
    rng = random.Random(8)
    raise_on_termination()
    try:
        for case in range(CASES):
            sig = signal.SIGTERM if case % 2 else signal.SIGINT
            path = tmp_path / f"{case}.cap"
            begun = record_until_signalled(path, sig, rng.uniform(0.0005, 0.01))
            got = read_capture(str(path))
            assert not got.warnings and got.trailer["reason"] == "signalled"
            # the last add() may have been cut before or after it took its line
            assert len(got.lines) in (begun - 1, begun), (case, begun, len(got.lines))
            assert got.lines == [line(i) for i in range(len(got.lines))], case
            assert got.trailer["lines"] == len(got.lines)
            path.unlink()
    finally:
        restore_defaults()


class Batches:
    """Hands out lines in batches, as a source's poll() does: once handed over they are the
    pipeline's to keep."""

    def __init__(self, lines: list[str], size: int):
        self.lines, self.size, self.handed = lines, size, 0

    def poll(self, timeout: float) -> list[str]:
        batch = self.lines[self.handed:self.handed + self.size]
        self.handed += len(batch)
        return batch


def test_a_signal_while_a_batch_is_fed_loses_none_of_it(tmp_path):
    """A SIGINT or SIGTERM landing while the pipeline feeds a batch (here sent by the model's
    listener at a random line of it) stops the session only once the whole batch is in the
    capture. The lines are the recorded lab capture's (conftest.recorded_capture)."""
    from conftest import recorded_capture
    from zfsobs.model import Model
    from zfsobs.pipeline import Pipeline
    from zfsobs.views.status import Status

    lines = read_capture(recorded_capture()).lines[:3000]
    rng = random.Random(7)
    for case in range(20):
        sig = (signal.SIGINT, signal.SIGTERM)[case % 2]
        kill_at, fed = rng.randrange(1, len(lines)), [0]

        def listener(ev, kill_at=kill_at, sig=sig):
            fed[0] += 1
            if fed[0] == kill_at:
                os.kill(os.getpid(), sig)

        source = Batches(lines, rng.choice((50, 300, 1000)))
        path = tmp_path / f"{case}.cap"
        writer = CaptureWriter(str(path), {"source": "test"})
        pipeline = Pipeline(source, Model(), Status(meta={}), writer, listeners=[listener])
        raise_on_termination()
        try:
            while source.handed < len(lines):
                pipeline.step(0)
        except (Terminated, KeyboardInterrupt):
            pass
        finally:
            restore_defaults()
        writer.close({"reason": "signalled"})
        assert fed[0] >= kill_at, f"case {case}: the signal never came"
        assert streams(read_capture(str(path)).lines) == streams(lines[:source.handed]), \
            f"case {case}: {source.handed} lines handed over, the signal at line {kill_at}"
