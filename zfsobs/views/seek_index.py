"""Where replay's far seeks start reading (zfsobs/views/replay.py): the way to a cut, read once.

A far seek reads every E record and digest from the capture's start to its cut, keeping what the
screen at the target reads (far_seek.Prefix): O(the target's offset), ~2 s three quarters into a
day. The index reads the whole capture that way once, a slice at a time while replay waits for
keys, and after each digest keeps the Prefix, the parser's counts and the stream's unread events,
compressed. A far seek then starts from the latest of those before its cut and reads only from
there.

A kept point is valid for a cut when the seek's own read plan (its digests are those that end
before the cut) has the same chunks up to that point: checked, not assumed (a digest that ends
past the cut leaves its records to be read line by line instead)."""
from __future__ import annotations

import pickle
import time
import zlib
from bisect import bisect_left

from zfsobs.capture import Capture
from zfsobs.capture.reader import EventStream
from zfsobs.events import Parser
from zfsobs.views.far_seek import Prefix

KEEP = 512          # kept points past this: every other one goes (a week: one per ~40 minutes)


class SeekIndex:
    def __init__(self, capture: Capture):
        self.capture = capture
        self.points: list[tuple[int, int, bytes]] = []      # (upto ts, chunks read, state)
        self.done = not capture.digests
        self._stream: EventStream | None = None
        self._prefix = Prefix()
        self._parser = Parser()
        self._upto = -1             # the newest ts the prefix has taken
        self._chunks: list = []     # the plan the points were taken on (every digest used)

    def step(self, budget_s: float) -> bool:
        """Read on for about `budget_s`; whether there is more to read."""
        if self.done:
            return False
        if self._stream is None:
            self._stream = self.capture.events(self._parser, digests=True)
            self._stream.peek = True
            self._chunks = self._stream.chunks
        stream, prefix, end = self._stream, self._prefix, time.monotonic() + budget_s
        k = stream.k
        while time.monotonic() < end:
            ev = next(stream, None)
            if ev is None:
                self.done = True
                self._stream = None
                return False
            if stream.k != k:        # a chunk was read to give it: after a digest, keep a point
                if self._chunks[stream.k - 1][1] < 0 and self._upto >= 0:
                    self._keep(stream, ev)
                k = stream.k
            prefix.add(ev)
            self._upto = ev.ts
        return True

    def build(self) -> None:
        while self.step(1.0):
            pass

    def _keep(self, stream: EventStream, ev) -> None:
        """The state before `ev`, the event just read: the chunks before stream.k read, the prefix
        with every event before it, it and the rest of the read events not yet taken."""
        unread = [ev, *stream.ready, *stream.pending]      # in the stream's order
        state = (self._prefix, self._parser, stream.stood_for, unread)
        self.points.append((self._upto, stream.k, zlib.compress(pickle.dumps(state, pickle.HIGHEST_PROTOCOL), 1)))
        if len(self.points) > KEEP:
            del self.points[1::2]

    def reach(self, cut: int) -> int:
        """Where a far seek to `cut` may start reading: the latest point before it (-1: none)."""
        i = bisect_left(self.points, cut, key=lambda p: p[0])
        return self.points[i - 1][0] if i else -1

    def start(self, stream: EventStream, cut: int) -> Prefix | None:
        """Put `stream` (a far seek's, its digests those ending before `cut`; what it read is dropped) at
        the latest kept point before `cut` whose chunks it shares, and give that point's prefix;
        None (the stream untouched) if there is none."""
        i = bisect_left(self.points, cut, key=lambda p: p[0])
        full = self._chunks
        for upto, k, blob in reversed(self.points[max(0, i - 4):i]):
            if len(stream.chunks) >= k and stream.chunks[k - 1] == full[k - 1] and stream.chunks[:k] == full[:k]:
                break
        else:
            return None
        prefix, parser, stood_for, unread = pickle.loads(zlib.decompress(blob))
        stream.parser.__dict__.update(parser.__dict__)
        stream.stood_for = stood_for
        # of the events read and not yet taken, those before every unread chunk's lowest are ready
        at = bisect_left(unread, stream.later[k], key=lambda e: e.ts)
        stream.go((k, unread[at:], unread[:at]))
        return prefix
