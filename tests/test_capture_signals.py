"""SIGTERM and SIGINT at any moment of a recording: every line handed to the capture before the
signal is in the file exactly once, and the trailer is written. Real signals, sent by a timer
thread at random moments while the main thread adds and flushes (a flush every 40 lines makes
most of the time fall inside a flush, where a signal once lost the buffer it had just taken)."""
from __future__ import annotations

import os
import random
import signal
import threading

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
