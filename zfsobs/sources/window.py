"""The recording window: one span of time that every probe recorded, the same for the lab, the
kernel lab and the host (docs/capture.md, "The recording window").

The tracers attach one by one (seconds here, minutes under the kernel lab's emulation), and a
probe that has attached records while the others attach. The window starts when the last probe
has attached, at its `hello`'s time: every probe records from there. A data line stamped before
that is no data of the window: the pipeline leaves it out and the capture's trailer counts it
(`before_window`). Each probe's `hello` is kept, stamped with the window's start (what the capture
holds of that probe starts there); its own attach time is in the capture's header. The window ends
at the stop: what a probe prints after it (its `bye` and END's last counts) carries the stop's time.
`--duration` counts from the window's start, so a capture's first-to-last event span is the
duration, give or take the loop's tick and the wait for the vdev queue's last dump at the stop."""
from __future__ import annotations

import time

from zfsobs.events import Event, EventLine

CLOCK_SLACK_NS = 10**9     # a hello this far outside the source's run is on another clock: no window


def ts_of(line: str) -> int | None:
    """The timestamp of an event line, None for anything else."""
    parts = line.split(None, 4)
    if len(parts) >= 4 and parts[0] == "zfsobs" and parts[3].isdigit():
        return int(parts[3])
    return None


def restamp(line: str, ts: int) -> str:
    """LINE with timestamp TS (the same kind and fields); a line with no timestamp as it is."""
    parts = line.split(None, 4)
    if len(parts) < 4 or parts[0] != "zfsobs" or not parts[3].isdigit():
        return line
    parts[3] = str(int(ts))
    text = " ".join(parts)
    ev = getattr(line, "event", None)
    if ev is None:
        return text
    out = EventLine(text)
    out.event = Event(ev.kind, int(ts), ev.fields)
    return out


class Window:
    """The window's start (None: the hellos' clock is not the monotonic one, so lines are not
    filtered and the duration counts from the moment every probe had attached) and each probe's
    attach time, from the hellos read while the probes attached."""

    def __init__(self, lines: list[str], source_start_ns: int | None = None, now_ns: int | None = None):
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        self.attached_at = now_ns          # when zfsobs saw the last probe attach
        self.attached: dict[str, int] = {}
        for line in lines:
            if " hello " in line:
                ts = ts_of(line)
                probe = next((w[6:] for w in line.split() if w.startswith("probe=")), "")
                if ts is not None and probe:
                    self.attached[probe] = min(ts, self.attached.get(probe, ts))
        start = max(self.attached.values(), default=None)
        low = (source_start_ns or now_ns) - CLOCK_SLACK_NS
        self.start_ns = start if start is not None and low <= start <= now_ns + CLOCK_SLACK_NS else None

    def restamped(self, lines: list[str]) -> list[str]:
        """The lines read while the probes attached, each hello stamped with the window's start."""
        if self.start_ns is None:
            return lines
        return [restamp(line, self.start_ns) if " hello " in line and (ts_of(line) or 0) < self.start_ns
                else line for line in lines]

    def deadline(self, duration: float) -> float:
        """When a run of DURATION seconds ends, on time.monotonic()'s clock."""
        return (self.start_ns if self.start_ns is not None else self.attached_at) / 1e9 + duration

    def meta(self) -> dict:
        """The capture header's `window`."""
        return {"start_mono_ns": self.start_ns, "attached_mono_ns": dict(self.attached)}
