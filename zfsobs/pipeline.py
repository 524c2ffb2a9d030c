"""One step of the data path: source lines -> events -> (capture) -> model -> listeners."""
from __future__ import annotations

from typing import Callable

from zfsobs.capture import CaptureWriter
from zfsobs.events import Event, Parser, is_event_line
from zfsobs.model import Model
from zfsobs.signals import whole
from zfsobs.views.status import Status


class Pipeline:
    def __init__(self, source, model: Model, status: Status, capture: CaptureWriter | None = None,
                 listeners: list[Callable[[Event], None]] | None = None, pools: tuple[str, ...] = (),
                 pool_prefixes: tuple[str, ...] = (), watcher=None, window_ns: int | None = None):
        self.source = source
        self.watcher = watcher         # tunables (zfsobs/sources/watcher.py): a second, polled source
        self.model = model
        self.status = status
        self.capture = capture
        self.parser = Parser()
        self.listeners = list(listeners or [])
        self.pools = tuple(pools)                  # only these pools...
        self.pool_prefixes = tuple(pool_prefixes)  # ...and pools named after these (the lab's)
        self.kept = 0                  # events that passed the pool filter and the window
        # the recording window's start (zfsobs/sources/window.py): an event stamped before it is
        # no data of the window (a probe that attached first recorded while the others attached)
        self.window_ns = -(1 << 63) if window_ns is None else window_ns
        self.before_window = 0

    def step(self, timeout: float) -> None:
        # poll() takes lines out of the source: a stop signal raised before they are all fed would
        # lose the rest of the batch, so it waits (the sources' waits end early when one comes)
        with whole():
            for line in self.source.poll(timeout):
                self.feed_line(line)
            if self.watcher is not None:
                for line in self.watcher.poll():
                    self.feed_line(line)
        if self.capture is not None:
            self.capture.tick()
            self.status.recorded_bytes = self.capture.bytes
        if getattr(self.source, "ended", ""):
            self.status.message = self.source.ended

    def feed_line(self, line: str) -> None:
        ev = getattr(line, "event", None)     # a line zfsobs made comes with its event (events.EventLine)
        if ev is None:
            ev = self.parser.parse(line)
        else:
            self.parser.events += 1
        self.status.malformed = self.parser.malformed
        self.status.ignored = self.parser.ignored
        if ev is not None and not self._wanted(ev):
            return
        if ev is not None and ev.ts < self.window_ns:
            self.before_window += 1
            return
        if self.capture is not None and is_event_line(line):
            self.capture.add(line, ev)      # malformed ones too: replay must count what live counted
        if ev is None:
            return
        self.kept += 1
        self.model.feed(ev)
        for listener in self.listeners:
            listener(ev)

    def _wanted(self, ev: Event) -> bool:
        pool = ev.fields.get("pool")
        if pool is None or not (self.pools or self.pool_prefixes):
            return True
        pool = str(pool)
        return pool in self.pools or any(pool.startswith(p) for p in self.pool_prefixes)
