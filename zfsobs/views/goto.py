"""Where in a capture a time the user gives is (`replay --at`, the replay's g key): an event ts.

    +OFFSET                 from the capture's first event: +90, +90s, +25m, +1h30m, +2d4h
    HH:MM[:SS]              local time, the first such moment at or after the first event
    YYYY-MM-DD HH:MM[:SS]   local time (or with a T between)

Wall-clock forms go through the capture's clock anchor (start_wall_ns/start_mono_ns), the one
wallclock() shows times with."""
from __future__ import annotations

import re
import time
from datetime import datetime, timedelta

from zfsobs.errors import ZfsobsError

FORMS = "+1h30m, HH:MM[:SS] or YYYY-MM-DD HH:MM[:SS]"
_OFFSET = re.compile(r"\+(?:(\d+(?:\.\d+)?)|((?:\d+(?:\.\d+)?[dhms])+))")
_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_UNIT = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}(?:\.\d+)?))?")


def parse(text: str, meta: dict, start: int, end: int) -> int:
    """The ts `text` names, between start and end (the first and last events); ZfsobsError, one
    line, if it is no time or not in the capture."""
    text = text.strip()
    offset = _OFFSET.fullmatch(text)
    if offset:
        if offset.group(1):
            seconds = float(offset.group(1))
        else:
            seconds = sum(float(n) * _UNIT[u] for n, u in _PART.findall(offset.group(2)))
        ts = start + int(seconds * 1e9)
    else:
        ts = _wall(text, meta, start) - _anchor(meta)
    if not start <= ts <= end:
        raise ZfsobsError(f"{text}: not in the capture, which runs from {span(meta, start, end)}")
    return ts


def _wall(text: str, meta: dict, start: int) -> int:
    """Wall-clock ns of a local time of day or date and time."""
    if _anchor(meta) is None:
        raise ZfsobsError(f"{text}: this capture has no clock anchor; give +OFFSET from its start")
    first = datetime.fromtimestamp((start + _anchor(meta)) / 1e9)
    clock = _CLOCK.fullmatch(text)
    if clock:
        h, m, s = int(clock.group(1)), int(clock.group(2)), float(clock.group(3) or 0)
        if h > 23 or m > 59 or s >= 60:
            raise ZfsobsError(f"{text}: not a time of day")
        at = first.replace(hour=h, minute=m, second=int(s), microsecond=int(s % 1 * 1e6))
        if at < first.replace(microsecond=0):       # earlier in the day than the first event: the next day's
            at += timedelta(days=1)
    else:
        try:
            at = datetime.fromisoformat(text.replace(" ", "T", 1))
        except ValueError:
            raise ZfsobsError(f"{text}: not a time (give {FORMS})") from None
        if at.tzinfo is not None:
            at = at.astimezone().replace(tzinfo=None)
    return int(at.timestamp() * 1e9)


def _anchor(meta: dict) -> int | None:
    """What turns an event ts into wall-clock ns (added), or None without a clock anchor."""
    if "start_wall_ns" not in meta or "start_mono_ns" not in meta:
        return None
    return meta["start_wall_ns"] - meta["start_mono_ns"]


def span(meta: dict, start: int, end: int) -> str:
    """'HH:MM:SS to HH:MM:SS on DATE' (or the offsets, without a clock anchor)."""
    if _anchor(meta) is None:
        return f"+0 to +{clock_offset(end - start)}"
    a, b = ((t + _anchor(meta)) / 1e9 for t in (start, end))
    fa, fb = time.localtime(a), time.localtime(b)
    if fa[:3] == fb[:3]:
        return f"{time.strftime('%H:%M:%S', fa)} to {time.strftime('%H:%M:%S', fb)} on {time.strftime('%Y-%m-%d', fa)}"
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', fa)} to {time.strftime('%Y-%m-%d %H:%M:%S', fb)}"


def clock_offset(ns: int) -> str:
    """An offset as the +OFFSET form reads it: 42s, 25m03s, 1h30m00s, 2d04h00m00s."""
    s = int(ns // 10**9)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d{h:02d}h{m:02d}m{s:02d}s"
    if h:
        return f"{h}h{m:02d}m{s:02d}s"
    return f"{m}m{s:02d}s" if m else f"{s}s"
