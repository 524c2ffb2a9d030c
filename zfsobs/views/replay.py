"""Replay a capture through the same screen: space pause, t / T one sample (1 s) forward / back,
j jump 10 s forward, g go to a time, r rewind, + / - speed, q quit. The model is a pure function of
the events up to the cursor: it is fed from a stream of the capture's records (memory: the live
model's, not the capture's), and every SNAP_NS of event time played its state is kept, compressed,
so a step back restarts from the latest kept state before the cursor instead of from the start.
A seek far past what was played reads the way there as a report does, from the digests
(zfsobs/capture/digest.py), and every line only for the history the screen reads before the target
(the model's whole history when a tunable change is that near): what the screen shows at the target
is the same (a day's capture: ~2 s instead of ~13 min)."""
from __future__ import annotations

import pickle
import time
import zlib
from bisect import bisect_right

from rich.console import Console

from zfsobs.capture import Capture
from zfsobs.errors import ZfsobsError
from zfsobs.events import Parser
from zfsobs.model import Model
from zfsobs.views import goto
from zfsobs.views.far_seek import Prefix
from zfsobs.views.keys import Keys
from zfsobs.views.paint import Painter
from zfsobs.views.screen import Fit, render_screen
from zfsobs.views.seek_index import SeekIndex
from zfsobs.views.status import Status

SAMPLE_NS = 10**9
JUMP_NS = 10 * 10**9
SNAP_NS = 60 * 10**9          # a step back feeds at most this much of the capture again
SNAP_BUDGET = 256 << 20       # kept states past this: the ones far from the cursor are thinned
FAR_NS = 2 * SNAP_NS          # a seek that would skip this much of the lines reads the digests instead
BACK_NS = 10 * 10**9          # after a far seek, steps back this far still use a kept state
DIGEST_SPEEDUP = 400          # the way there reads ~this many times faster than the lines (~7 µs vs 3 ms a second)


def horizon() -> int:
    """The longest history any part of the model keeps (read when used: the tests shrink them)."""
    from zfsobs.model import samples, vdev_cache, vdev_queue, zil
    return max(samples.KEEP_NS, vdev_queue.KEEP_NS, vdev_cache.KEEP_NS, zil.FLOW_KEEP_NS)


def screen_horizon() -> int:
    """The lines the screen reads at a time with no tunable change in the horizon() before it: the
    event rate's seconds and the vdev panels' second. The txg and ZIL panels read their minute of
    rows, which a far seek keeps of the way there (far_seek.Prefix); only the tuning panel reads
    further back, its samples around a change, and a full replay keeps none from before the horizon."""
    from zfsobs.model import RATE_WINDOW_NS
    from zfsobs.views import vc_panel, vq_panel, zil_panel
    return min(horizon(), max(RATE_WINDOW_NS, zil_panel.RATE_NS, int(1e9 * max(vq_panel.WINDOW_S, vc_panel.WINDOW_S))))


class Replayer:
    def __init__(self, capture: Capture, speed: float = 1.0, snap_ns: int = SNAP_NS):
        self.capture = capture
        self.snap_ns = snap_ns
        self.snaps: dict[int, bytes] = {}     # ts -> the state with every event up to ts fed
        self.index = SeekIndex(capture)       # where far seeks start reading, built while keys are awaited
        self._kept = 0                        # their bytes
        self.start = 0
        self._begin()
        self.start = self.fed = self.next.ts if self.next else 0
        self.end = max(capture.last_ts() or self.start, self.start)
        self.status = Status(capture.meta, mode="replay", speed=speed, end_ns=self.end - self.start,
                             start_ts=self.start, warnings=capture.warnings)
        self.cursor = self.start

    def _begin(self, before: int | None = None) -> None:
        """From the start: every line, or with `before` the digests of what ends before it."""
        self.parser = Parser()
        self.stream = self.capture.events(self.parser, digests=before is not None, before=before)
        self.model = Model(counters=False)      # the run totals are the exporter's: no view here reads them
        self.next = next(self.stream, None)
        self._snapped = None
        self.before = before
        self.exact_from = 0          # states kept from here on show what every line would show
        self.short_until = 0         # after a short far seek: a tunable change fed before this needs a full one
        self.fed = self.start        # the model holds the events up to this

    def seek(self, ts: int) -> None:
        ts = min(max(ts, self.start), self.end)
        kept = self._kept_before(ts)
        if ts < self.fed or (kept is not None and kept > self.fed):     # behind, or a kept state nearer
            self._back_to(ts)
        cut = ts - screen_horizon() - BACK_NS      # a short far seek's (a full one's is earlier)
        # the digests from the start (or the index's point) to `cut` instead of the lines from `fed`:
        # when that skips enough
        way = cut - max(self.start, self.index.reach(cut))
        if self.capture.digests and cut - self.fed > max(FAR_NS, way // DIGEST_SPEEDUP):
            self._far(ts)
        self.cursor = self.fed = ts
        while self.next is not None and self.next.ts <= ts:
            ev = self.next
            self.model.feed(ev)
            self.next = next(self.stream, None)
            if ev.kind == "tunable" and ev.ts < self.short_until and self._changed(ev):
                self._far(ts, short=False)      # the tuning panel reads samples from before the short cut
                continue
            if self.next is not None and self.next.ts > ev.ts and ev.ts >= self.exact_from and \
                    ev.ts - (self._snapped or self.start) >= self.snap_ns:
                self._snap(ev.ts)
        self.status.cursor_ns = self.cursor - self.start
        self.status.malformed = self.parser.malformed

    def _far(self, ts: int, short: bool = True) -> None:
        """The model at `ts` from the digests up to a cut, every line after: it keeps no more than
        horizon() of history, which the lines from the cut on fill as a full replay does (the line
        before each series' first after the cut is its digest's last). No state is kept before
        exact_from: one there would lack what the screen's windows read.
        Short: the cut only screen_horizon() back, when no tunable change lies in the horizon()
        before `ts` or a step back from it (found in the prefix; one met in the lines after the cut
        while short_until runs, here or played on later, makes the seek again in full)."""
        full = ts - horizon() - BACK_NS
        short = short and screen_horizon() < horizon()
        cut = ts - screen_horizon() - BACK_NS if short else full
        self._begin(before=cut)
        self.exact_from = ts - BACK_NS
        # the 1 s bins before `cut` are gone from the screen by `ts`: binning them from the day's
        # digests was nine tenths of a far seek's time (docs/performance.md, "Go to a time"). A short
        # seek's screen reads none (no change near): binned from the first state it may keep on
        self.model.samples.measure_from = self.exact_from if short else cut
        self.stream.peek = True  # counter lines read only to their series (far_seek.Prefix needs no more)
        prefix = self.index.start(self.stream, cut)     # of the way there, what the screen at `ts` reads
        if prefix is None:
            prefix = Prefix()
        else:                    # read on from the index's point, not from the start
            self.next = next(self.stream, None)
        while self.next is not None and self.next.ts < cut:
            prefix.add(self.next)
            self.next = next(self.stream, None)
        self.stream.stop_peeking()     # a V record read on the way may hold lines past the cut
        self.next = self.stream.unpeek(self.next)
        for ev in prefix.kept():
            ev = self.stream.unpeek(ev)
            if ev is not None:
                self.model.feed(ev)
        if prefix.first_ts is not None:
            self.model.first_ts = prefix.first_ts
        self.model.txg.throttled |= prefix.throttle_seen
        # every digest ended before `cut`, so all were read: the events they stood for count as fed,
        # as do the ones the prefix skipped
        self.model.events += self.stream.stood_for + prefix.skipped()
        self.fed = cut
        if short:
            if any(c.ts > full for c in self.model.tuning.changes):
                self._far(ts, short=False)
            else:
                self.short_until = self.exact_from + horizon()     # samples for a change from then on

    def _changed(self, ev) -> bool:
        """Whether the tunable line just fed was a change (not a session's initial value)."""
        latest = self.model.tuning.latest
        return latest is not None and latest.ts == ev.ts and latest.name == str(ev.fields.get("name"))

    def _kept_before(self, ts: int) -> int | None:
        keys = sorted(self.snaps)
        i = bisect_right(keys, ts) - 1
        return keys[i] if i >= 0 else None

    def _snap(self, ts: int) -> None:
        kept = self._kept_before(ts)
        if kept is not None and kept > (self._snapped or self.start):
            self._snapped = kept           # played again after a step back: this stretch is kept
            return
        state = (self.model, self.parser, self.stream.place(), self.next, self.before, self.exact_from,
                 self.short_until)
        self.snaps[ts] = zlib.compress(pickle.dumps(state, pickle.HIGHEST_PROTOCOL), 1)
        self._snapped = ts
        self._kept += len(self.snaps[ts])
        while self._kept > SNAP_BUDGET and len(self.snaps) > 2:
            self._thin(ts)

    def _thin(self, at: int) -> None:
        """Over budget: drop the state whose neighbours are closest together for its distance from
        the cursor. States stay one a SNAP_NS just behind the cursor, where a step back lands, and
        thin out, ever wider apart, towards the start (a long way back may feed minutes again)."""
        keys = sorted(self.snaps)
        i = min(range(1, len(keys) - 1), key=lambda j: (keys[j + 1] - keys[j - 1]) / (abs(at - keys[j]) + self.snap_ns))
        self._kept -= len(self.snaps.pop(keys[i]))

    def _back_to(self, ts: int) -> None:
        kept = self._kept_before(ts)
        if kept is None:
            self._begin()
            return
        self.model, self.parser, place, self.next, self.before, self.exact_from, self.short_until = \
            pickle.loads(zlib.decompress(self.snaps[kept]))
        self.stream = self.capture.events(self.parser, digests=self.before is not None, before=self.before)
        self.stream.go(place)
        self._snapped = self.fed = kept

    def key(self, key: str) -> bool:
        st = self.status
        if st.prompt is not None:
            self._typed(key)
            return True
        if key in ("q", "Q"):
            return False
        if key == "g":
            st.prompt, st.paused = "", True
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

    def go(self, text: str) -> None:
        """Seek to a time as the user gives it (zfsobs/views/goto.py); ZfsobsError if it is none."""
        self.seek(goto.parse(text, self.status.meta, self.start, self.end))

    def _typed(self, key: str) -> None:
        """A key while a time is typed after g: Enter goes there, Esc leaves, Backspace erases."""
        st = self.status
        if key in ("\n", "\r"):
            text, st.prompt = st.prompt, None
            try:
                if text.strip():
                    self.go(text)
                st.message = ""
            except ZfsobsError as e:
                st.message = str(e)
        elif key == "\x1b":
            st.prompt = None
        elif key in ("\x7f", "\b"):
            st.prompt = st.prompt[:-1]
        elif key.isprintable() and len(st.prompt) < 40:
            st.prompt += key


def run_replay(capture: Capture, console: Console, speed: float, at: str | None = None) -> None:
    rp = Replayer(capture, speed)
    start = goto.parse(at, capture.meta, rp.start, rp.end) if at else rp.start     # a bad --at: one line
    with Keys() as keys, Painter(console) as painter:
        last, fit = time.monotonic(), Fit()
        rp.seek(start)
        while True:
            rp.index.step(0.05)  # a slice of the far seeks' index while nothing else is asked
            key = keys.read(0.1)
            if key and rp.key(key) is False:
                return
            now = time.monotonic()
            if not rp.status.paused:
                rp.seek(rp.cursor + int((now - last) * 1e9 * rp.status.speed))
                if rp.cursor >= rp.end:
                    rp.status.paused = True
            last = now
            painter.paint(render_screen(rp.model, rp.status, console.height, rp.cursor, fit))
