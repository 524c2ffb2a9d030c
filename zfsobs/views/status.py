"""What the header says about the run itself, independent of any metric."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Status:
    meta: dict                       # capture header / live source meta
    mode: str = "live"               # live | replay
    malformed: int = 0
    ignored: int = 0
    recording: str = ""              # capture path while recording
    recorded_bytes: int = 0
    paused: bool = False
    keys: bool = True                # live: keys reach the view (the kernel lab's guest has no stdin)
    cursor_ns: int | None = None     # replay position (event time)
    end_ns: int | None = None        # replay end (event time)
    start_ts: int | None = None      # replay: the first event's ts, which cursor_ns counts from
    prompt: str | None = None        # replay: the time being typed after g
    speed: float = 1.0
    message: str = ""                # e.g. why the source ended
    cost: str = ""                   # live: what tracing costs (zfsobs/sources/selfcost.py)
    warnings: list[str] = field(default_factory=list)
