"""Replay a capture through the same screen: space pause, t / T one sample (1 s) forward / back,
j jump 10 s forward, r rewind, + / - speed, q quit. A step back rebuilds the model from the start:
the model is a pure function of the events up to the cursor."""
from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live

from zfsobs.capture import Capture
from zfsobs.events import Event, Parser, parse_all
from zfsobs.model import Model
from zfsobs.views.keys import Keys
from zfsobs.views.screen import Fit, render_screen
from zfsobs.views.status import Status

SAMPLE_NS = 10**9
JUMP_NS = 10 * 10**9


class Replayer:
    def __init__(self, capture: Capture, speed: float = 1.0):
        self.parser = Parser()
        self.events: list[Event] = parse_all(capture.lines, self.parser)
        self.start = self.events[0].ts if self.events else 0
        self.end = self.events[-1].ts if self.events else 0
        self.status = Status(capture.meta, mode="replay", malformed=self.parser.malformed,
                             speed=speed, end_ns=self.end - self.start, warnings=capture.warnings)
        self.cursor = self.start
        self._reset()

    def _reset(self) -> None:
        self.model = Model()
        self.index = 0

    def seek(self, ts: int) -> None:
        ts = min(max(ts, self.start), self.end)
        if ts < self.cursor:
            self._reset()
        self.cursor = ts
        while self.index < len(self.events) and self.events[self.index].ts <= ts:
            self.model.feed(self.events[self.index])
            self.index += 1
        self.status.cursor_ns = self.cursor - self.start

    def key(self, key: str) -> bool:
        st = self.status
        if key in ("q", "Q"):
            return False
        if key == " ":
            st.paused = not st.paused
        elif key in ("t", "T"):
            st.paused = True
            self.seek(self.cursor + (SAMPLE_NS if key == "t" else -SAMPLE_NS))
        elif key == "j":
            self.seek(self.cursor + JUMP_NS)
        elif key == "r":
            self.seek(self.start)
        elif key == "+":
            st.speed *= 2
        elif key == "-":
            st.speed /= 2
        return True


def run_replay(capture: Capture, console: Console, speed: float) -> None:
    rp = Replayer(capture, speed)
    with Keys() as keys, Live(console=console, screen=True, auto_refresh=False) as live:
        last, fit = time.monotonic(), Fit()
        rp.seek(rp.start)
        while True:
            key = keys.read(0.1)
            if key and rp.key(key) is False:
                return
            now = time.monotonic()
            if not rp.status.paused:
                rp.seek(rp.cursor + int((now - last) * 1e9 * rp.status.speed))
                if rp.cursor >= rp.end:
                    rp.status.paused = True
            last = now
            live.update(render_screen(rp.model, rp.status, console.height, rp.cursor, fit), refresh=True)
