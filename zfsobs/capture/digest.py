"""Digests: what a report needs of a span of V records, so that `report` on a day or a week of
recording reads O(records), not O(lines) (docs/capture.md, "Digests").

The queue and cache counters (vq, vq_lat, vq_vdev, vc lines) are most of a capture, and they are
cumulative: a whole-capture report needs only, per series and vdev incarnation, its first line,
its last, and the lines holding its peak depths (zfsobs/model/vdev_queue.py totals). A digest
keeps those lines verbatim, so the report feeds them through the same parser and model; it stands
for the span's other lines, which the report then skips. It is an index, not data: the V records
stay whole, replay reads them, and a report reads them where no intact digest covers them.

Exact by construction only if each vdev's lines come in time order (one probe prints them so); a
span where one came out of order gets no digest.
"""
from __future__ import annotations

import json

from zfsobs.capture.format import MAX_LINES, NO_TS, as_json
from zfsobs.events import INT_RANGE, Event
from zfsobs.model.vdev_queue import CLASSES

DIGESTED = frozenset(("vq", "vq_lat", "vq_vdev", "vc"))
SPAN_SECONDS = 300.0     # a report parses at most this much of the counter lines past the last digest
FORGET_NS = 600 * 10**9  # a vdev idle this long has its incarnation state forgotten
_DEPTHS = frozenset((int, type(None)))      # a depth field: a number, or absent (-1)


def digestible(ev: Event) -> bool:
    """A counter line of the usual shape; anything odd stays in an E record, read whole."""
    f = ev.fields
    if ev.kind not in DIGESTED or type(f.get("pid")) is not int or type(f.get("vd")) is not str:
        return False
    if ev.kind in ("vq", "vq_lat"):
        cls = f.get("class")
        if not (type(cls) is int and 0 <= cls < len(CLASSES)):
            return False
        if ev.kind == "vq_lat":
            return type(f.get("kind")) is int
        return _DEPTHS.issuperset(map(type, map(f.get, ("pend", "act", "pend_max", "act_max"))))
    return True


class Digest:
    def __init__(self):
        # per (family, pid, vd): [highest ts, incarnation, final seen, final ts], across spans
        self._vdevs: dict[tuple, list] = {}
        self._start()

    def _start(self) -> None:
        self.first_seq: int | None = None
        self.last_seq: int | None = None
        self.lines = 0
        self.low = NO_TS          # lowest ts of the span: the report orders by it
        self._exact = True
        self._picks: dict[tuple, list] = {}     # key -> [first, peak pend, peak act, last] as (n, line, value)
        self._high = -NO_TS
        self._ends: list = [None, None]
        self._n = 0

    def add(self, line: str, ev: Event) -> None:
        """One digestible line, in arrival order."""
        f, kind = ev.fields, ev.kind
        family = "vc" if kind == "vc" else "vq"
        pid, vd = f["pid"], f["vd"]
        state = self._vdevs.get((family, pid, vd))
        if state is None:
            state = self._vdevs[(family, pid, vd)] = [ev.ts, 0, False, 0]
        elif ev.ts < state[0]:
            self._exact = False        # out of time order: the picks would not be the model's
        state[0] = max(state[0], ev.ts)
        # a new incarnation exactly where the model starts one (VdevQueueModel / VdevCacheModel.feed)
        if state[2] and (family == "vc" or ev.ts > state[3]):
            state[1], state[2] = state[1] + 1, False
        if kind == "vq_vdev" or kind == "vc":
            state[2], state[3] = bool(f.get("final")), ev.ts
        self.lines += 1
        self._n += 1
        n = self._n
        if ev.ts < self.low:          # the span's earliest and latest lines: the capture's duration
            self.low, self._ends[0] = ev.ts, (n, line)
        if ev.ts >= self._high:
            self._high, self._ends[1] = ev.ts, (n, line)
        if kind == "vq":
            key = (kind, pid, vd, state[1], f["class"])
            pend = max(f.get("pend_max") or 0, f.get("pend") or 0)
            act = max(f.get("act_max") or 0, f.get("act") or 0)
            picks = self._picks.get(key)
            if picks is None:
                self._picks[key] = [(n, line), (n, line, pend), (n, line, act), (n, line)]
                return
            if pend > picks[1][2]:
                picks[1] = (n, line, pend)
            if act > picks[2][2]:
                picks[2] = (n, line, act)
            picks[3] = (n, line)
        else:       # histograms, vdev identity, cache counters: the latest holds them
            key = (kind, pid, vd, state[1], f.get("class"), f.get("kind"))
            self._picks[key] = [(n, line)]

    def covered(self, seq: int) -> None:
        """A V record holding lines given to add() was written with this sequence number."""
        self.first_seq = seq if self.first_seq is None else self.first_seq
        self.last_seq = seq

    def take(self, now_ts: int | None = None) -> bytes | None:
        """The span's digest payload (None: nothing to digest, or not exactly), and a new span."""
        payload = None
        if self.first_seq is not None and self._exact:
            chosen = {p[0]: p[1] for picks in (*self._picks.values(), self._ends) for p in picks}
            head = {"seqs": [self.first_seq, self.last_seq], "lines": self.lines, "picked": len(chosen),
                    "low": self.low}
            payload = (json.dumps(head) + "\n" + "".join(chosen[n] + "\n" for n in sorted(chosen))).encode()
        if now_ts is not None:
            self._vdevs = {k: s for k, s in self._vdevs.items() if now_ts - s[0] < FORGET_NS}
        self._start()
        return payload


def read(payload: bytes | None) -> tuple[dict, list[str]] | None:
    """(head, picked lines) of a digest payload; None if it is not one."""
    if payload is None or payload.count(b"\n") > MAX_LINES + 1:
        return None
    text = payload.decode("utf-8", "replace")
    first, _, rest = text.partition("\n")
    head = as_json(first)
    try:
        lo, hi = head["seqs"]
        lines, picked = head["lines"], head["picked"]
    except (ValueError, KeyError, TypeError):
        return None
    picks = rest.splitlines()
    if (not all(type(x) is int and -INT_RANGE < x < INT_RANGE for x in (lo, hi, lines, picked, head.get("low", 0)))
            or lo > hi or len(picks) != picked):
        return None
    return head, picks
