"""The live/replay screen fits the terminal: on 80x24 every panel is still there (the tables give
up their rows first), on a tall one the tables are shown. Fed the recorded captures in tests/data
(real bpftrace on the real libzpool; ./scripts/record-fixtures re-records them)."""
from __future__ import annotations

import os
import re

import pytest
from rich.console import Console

from conftest import DATA, recorded_capture
from zfsobs.capture import read_capture
from zfsobs.events import Parser, parse_all
from zfsobs.model import Model
from zfsobs.views.screen import render_screen
from zfsobs.views.status import Status

TITLES = ("txg sync", "ZIL", "vdev queue", "vdev_cache")
COST = "cost: zfsobs 17.6% · bpftrace 1.4% of a CPU · BPF run time off (sysctl kernel.bpf_stats_enabled=1)"


@pytest.fixture(scope="module", params=["lab", "vdev-cache"])
def fed(request):
    path = recorded_capture() if request.param == "lab" else os.path.join(DATA, "vdev-cache-2.1.11.cap")
    cap = read_capture(path)
    model = Model()
    for ev in parse_all(cap.lines, Parser()):
        model.feed(ev)
    status = Status(cap.meta, mode="live")
    status.cost = COST
    return model, status


def draw(fed, width: int, height: int) -> list[str]:
    model, status = fed
    console = Console(record=True, width=width, height=height, file=open(os.devnull, "w"))
    console.print(render_screen(model, status, height, model.last_ts))
    return console.export_text().splitlines()


@pytest.mark.parametrize("width,height", [(80, 24), (100, 30), (120, 40), (160, 60)])
def test_every_panel_fits_the_terminal(fed, width, height):
    lines = draw(fed, width, height)
    text = "\n".join(lines)
    assert len(lines) <= height and max(map(len, lines)) <= width
    assert any("zfsobs" in line and "OpenZFS 2.1.11" in line for line in lines[:2])   # framed or not
    for title in TITLES:
        assert f"─ {title}" in text, (title, text)
    assert "cost: zfsobs 17.6%" in text                              # the cost line, on one line


def test_a_tall_terminal_shows_everything_a_short_one_the_tables_first(fed):
    """At 80x24 the sparklines and the summaries' second lines go before the tables' last rows
    (issue 42, item 1: the txg and ZIL tables went first)."""
    tall, short = "\n".join(draw(fed, 160, 60)), "\n".join(draw(fed, 80, 24))
    for text in (tall, short):
        assert re.search(r"last \d+ s:", text)                          # the txg summary
        assert "interval ms" in text and "lat p50 ms" in text          # the txg and ZIL tables
    assert "sync  " in tall and "interval ms p50" in tall              # sparkline, second summary line
    assert "sync  " not in short
    # the vdev queue keeps its busiest vdevs: the header row and at least one vdev
    vq = short[short.index("─ vdev queue"):].splitlines()
    assert vq[1].strip("│ ").startswith("vdev ") and "/" in vq[2]      # the legend: README


@pytest.mark.parametrize("width", [80, 100, 120, 200])
def test_a_narrow_terminal_drops_minor_columns_instead_of_cutting_every_one(fed, width):
    text = "\n".join(draw(fed, width, 70))
    for header in (r"\btxg +sync ms +commits\b", r"\btxg +(pid +)?sync ms +interval ms\b"):   # ZIL, txg tables
        head = next((ln for ln in text.splitlines() if re.search(header, ln)), None)
        assert head is not None and "…" not in head, (width, head)



def test_one_slow_sync_does_not_flatten_the_other_bars():
    """The bars run to the window's p90: a 7.2 s sync among 20 ms ones is a clipped bar (▸), the rest long."""
    from zfsobs.views.txg_panel import _p90
    assert _p90([20] * 19 + [7200]) == 20 and _p90([]) == 0


def test_a_summary_wraps_between_phrases_never_inside_one():
    from zfsobs.views.phrases import Phrases
    texts = [t.plain for t in Phrases(None, ["sync ms p50 18.46", "p99 86.16", "max 112.39"], max_lines=2).texts(30)]
    assert texts == ["sync ms p50 18.46  p99 86.16", "max 112.39"]
    assert [t.plain for t in Phrases(None, ["a b c", "d"], max_lines=1).texts(6)] == ["a b c"]


def test_the_mode_line_says_only_what_is_true():
    """'PAUSED (recording continues)' showed when nothing recorded, and the kernel lab's guest view
    offered q, which no key reaches there (issue 42)."""
    from zfsobs.views.header import _mode_text
    assert _mode_text(Status({}, paused=True)).plain.split("   ")[0] == "  PAUSED"
    recording = _mode_text(Status({}, paused=True, recording="/tmp/x.cap")).plain
    assert "PAUSED (recording continues)" in recording and "q quit" in recording
    guest = _mode_text(Status({}, keys=False)).plain
    assert "q quit" not in guest and "Ctrl-C quits" in guest


def test_a_quiet_throttle_says_where_delays_begin():
    """'throttle: 0 delayed in 0 txgs' and 'delay mean 0 max 0 ms' read as a fault, and nothing said
    what makes it move (issue 42, item 5). The 2.4.4 kernel capture's throttle delayed nothing."""
    cap = read_capture(os.path.join(DATA, "awqset-2.4.4.cap"))
    model = Model()
    for ev in parse_all(cap.lines, Parser()):
        model.feed(ev)
    text = "\n".join(draw((model, Status(cap.meta, mode="live")), 200, 60))
    assert "throttle: 0 delayed in 0 txgs" in text
    assert "delays begin past zfs_delay_min_dirty_percent of zfs_dirty_data_max" in text
    assert "delay mean" not in text


@pytest.mark.parametrize("width", [80, 100, 120])
def test_vdev_names_keep_their_end_and_the_header_is_never_cut(width):
    """At 160 columns the header read 'max/l…' and names 'zfsobs_lab_16983.13a [186…': the end that
    tells vdevs apart was the part cut (issue 42, item 1)."""
    cap = read_capture(os.path.join(DATA, "vdev-cache-2.1.11.cap"))
    model = Model()
    for ev in parse_all(cap.lines, Parser()):
        model.feed(ev)
    lines = draw((model, Status(cap.meta, mode="live")), width, 46)
    start = next(i for i, line in enumerate(lines) if "─ vdev queue" in line)
    head, *rows = [line.strip("│ ") for line in lines[start + 1:] if line.startswith("│")][:4]
    assert head.startswith("vdev") and "…" not in head.split("syncR")[0], head
    names = [row.split("   ")[0].strip() for row in rows]
    assert all(re.search(r"\.\d+a \[\d+\]$", n) for n in names) and len(set(names)) == len(names), names
