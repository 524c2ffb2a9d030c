"""The txg and ZIL panels' "last 60 s" says what the view holds: 20 s into a run it said "last 60 s"
(issue 42, item 1); after a replay's far seek it is what a full replay says."""
from __future__ import annotations

import os
import re

from rich.console import Console

from conftest import DATA
from zfsobs.capture import read_capture
from zfsobs.events import Parser, parse_all
from zfsobs.model import Model
from zfsobs.views.far_seek import Prefix
from zfsobs.views.screen import render_screen
from zfsobs.views.status import Status
from zfsobs.views.window import label

LAB = os.path.join(DATA, "lab-2.1.11.cap")
LONG = os.path.join(DATA, "awqset-2.4.4.cap")       # a guest's 2-minute run


def spans(model: Model, meta: dict, now: int) -> list[int]:
    """The seconds of every 'last N s: ... txgs|commits' label on a tall screen."""
    console = Console(record=True, width=200, height=60, file=open(os.devnull, "w"))
    console.print(render_screen(model, Status(meta, mode="live"), 60, now))
    return [int(n) for n in re.findall(r"last (\d+) s: \d+ (?:txgs|commits)", console.export_text())]


def events(path: str):
    cap = read_capture(path)
    return cap.meta, list(parse_all(cap.lines, Parser()))


def test_twenty_seconds_into_a_run_the_label_says_twenty():
    meta, evs = events(LAB)
    model = Model()
    for ev in evs:
        if ev.ts - evs[0].ts > 20 * 10**9:
            break
        model.feed(ev)
    found = spans(model, meta, model.last_ts)
    assert len(found) == 2 and all(15 <= n <= 20 for n in found), found     # the txg and ZIL panels


def test_a_run_longer_than_the_window_says_the_window():
    meta, evs = events(LONG)
    model = Model()
    for ev in evs:
        model.feed(ev)
    assert spans(model, meta, model.last_ts) == [60, 60]


def test_after_a_far_seek_the_label_is_a_full_replays():
    """A far seek keeps twice the window's rows before its cut and the first events whole
    (views/far_seek.py): the label is what playing there shows (a label counted from the oldest row
    held said 'last 1 s' where a full replay said 'last 2 s': tests/test_replay.py)."""
    meta, evs = events(LONG)
    prefix = Prefix()
    for ev in evs:
        prefix.add(ev)
    model, full = Model(), Model()
    for ev in prefix.kept():
        model.feed(ev)
    for ev in evs:
        full.feed(ev)
    assert spans(model, meta, evs[-1].ts) == spans(full, meta, evs[-1].ts) == [60, 60]


def test_the_label_rounds_what_is_held_and_never_says_more_than_the_window():
    assert label(60 * 10**9, 100 * 10**9, 10 * 10**9) == "last 60 s"
    assert label(60 * 10**9, 30 * 10**9, 10 * 10**9) == "last 20 s"
    assert label(60 * 10**9, 10 * 10**9, 10 * 10**9) == "last 1 s"
    assert label(60 * 10**9, 10 * 10**9, None) == "last 60 s"
