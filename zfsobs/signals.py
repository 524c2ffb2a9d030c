"""SIGINT, SIGTERM and SIGHUP as exceptions, so every cleanup runs; and sections a signal must
not cut in half (a capture record written, its buffer not yet emptied, would be written twice)."""
from __future__ import annotations

import signal
from contextlib import contextmanager

_STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_depth = 0
_pending: list[int] = []


class Terminated(Exception):
    """SIGTERM / SIGHUP: leave the loop like Ctrl-C so every cleanup runs."""


def _raise(signum: int) -> None:
    _pending.clear()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signal.Signals(signum).name)


def _handler(signum, frame) -> None:
    if _depth:
        _pending.append(signum)     # raised when the section ends
    else:
        _raise(signum)


def raise_on_termination() -> None:
    """SIGINT raises KeyboardInterrupt, SIGTERM and SIGHUP raise Terminated, except inside whole()."""
    for sig in _STOPS:
        signal.signal(sig, _handler)


def restore_defaults() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in _STOPS[1:]:
        signal.signal(sig, signal.SIG_DFL)


def stop_pending() -> bool:
    """A stop signal waits for the current whole() section: a wait inside one should end now."""
    return bool(_pending)


@contextmanager
def whole():
    """A section that a stop signal waits for: it is raised when the section ends, unless the
    section itself failed (that error is the one to report)."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
    if not _depth and _pending:
        _raise(_pending[0])
