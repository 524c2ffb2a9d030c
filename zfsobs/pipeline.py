"""One step of the data path: source lines -> events -> (capture) -> model -> listeners."""
from __future__ import annotations

from typing import Callable

from zfsobs.capture import CaptureWriter
from zfsobs.events import MAGIC, Event, Parser
from zfsobs.model import Model
from zfsobs.views.status import Status


class Pipeline:
    def __init__(self, source, model: Model, status: Status, capture: CaptureWriter | None = None,
                 listeners: list[Callable[[Event], None]] | None = None):
        self.source = source
        self.model = model
        self.status = status
        self.capture = capture
        self.parser = Parser()
        self.listeners = list(listeners or [])

    def step(self, timeout: float) -> None:
        for line in self.source.poll(timeout):
            self.feed_line(line)
        if self.capture is not None:
            self.capture.tick()
            self.status.recorded_bytes = self.capture.bytes
        if getattr(self.source, "ended", ""):
            self.status.message = self.source.ended

    def feed_line(self, line: str) -> None:
        if self.capture is not None and line.startswith(MAGIC + " "):
            self.capture.add(line)      # malformed ones too: replay must count what live counted
        ev = self.parser.parse(line)
        self.status.malformed = self.parser.malformed
        self.status.ignored = self.parser.ignored
        if ev is None:
            return
        self.model.feed(ev)
        for listener in self.listeners:
            listener(ev)
