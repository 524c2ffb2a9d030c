"""zfsobs/views/paint.py: top and replay write the screen's lines themselves, not through rich's Live.
On recorded real captures (the lab's and a 2.4.4 kernel guest's with a tunable change), each frame
has the text and styles Live(screen=True) wrote, byte for byte, at three terminal sizes; and
`zfsobs replay` in a real pseudo-terminal leaves the terminal as it found it."""
from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest
from rich.console import Console
from rich.live import Live

from conftest import DATA
from zfsobs.capture import read_capture
from zfsobs.events import Parser
from zfsobs.model import Model
from zfsobs.views.paint import Painter
from zfsobs.views.screen import Fit, render_screen
from zfsobs.views.status import Status

ESC = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
MOVES = re.compile(r"\x1b\[[0-9;?]*[A-LN-Za-z]")     # every control sequence but the styles (SGR, "m")
PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def screens(text: str) -> list[str]:
    """A frame's text as lines, escapes and trailing blanks gone."""
    lines = [line.rstrip() for line in ESC.sub("", text).split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


@pytest.mark.parametrize("size", ["200x60", "120x40", "80x24"])
@pytest.mark.parametrize("name", ["lab-2.1.11.cap", "awqset-2.4.4.cap"])
def test_each_frame_is_what_rich_live_wrote(name, size):
    width, height = (int(n) for n in size.split("x"))
    capture, parser = read_capture(os.path.join(DATA, name)), Parser()
    lines = sorted(((ev.ts, line) for line in capture.lines if (ev := parser.parse(line)) is not None))
    model, status, fits = Model(counters=False), Status(capture.meta), (Fit(), Fit())
    consoles = [Console(file=io.StringIO(), width=width, height=height, force_terminal=True,
                        color_system="truecolor") for _ in range(2)]
    live = Live(console=consoles[0], screen=True, auto_refresh=False, redirect_stdout=False, redirect_stderr=False)
    live.start()
    frames, second = 0, lines[0][0] + 10**9
    try:
        with Painter(consoles[1]) as painter:
            for ts, line in lines:
                while ts >= second:
                    for c in consoles:
                        c.file = io.StringIO()
                    live.update(render_screen(model, status, height, second, fits[0]), refresh=True)
                    painter.paint(render_screen(model, status, height, second, fits[1]))
                    drawn = consoles[1].file.getvalue()
                    assert drawn.startswith("\x1b[H")        # from the top left, nothing cleared first
                    # the same text, styles and padding to the terminal's size, byte for byte (how
                    # Live moves the cursor is rich's to change)
                    assert MOVES.sub("", drawn) == MOVES.sub("", consoles[0].file.getvalue()), (frames, size)
                    # the whole terminal, each line its full width: what a longer frame left is gone
                    rows = ESC.sub("", drawn).split("\n")
                    assert len(rows) == height and {len(r) for r in rows} == {width}, (frames, size)
                    frames, second = frames + 1, second + 10**9
                model.feed(parser.parse(line))
    finally:
        live.stop()
    assert frames >= 30


def test_replay_in_a_terminal_leaves_it_as_it_found_it():
    """`zfsobs replay` on a pseudo-terminal: the alternate screen and a hidden cursor while it runs,
    the panels drawn, and on q both given back and exit status 0."""
    master, slave = pty.openpty()
    os.set_blocking(master, False)
    proc = subprocess.Popen([sys.executable, "-m", "zfsobs", "replay", os.path.join(DATA, "lab-2.1.11.cap")],
                            stdin=slave, stdout=slave, stderr=subprocess.PIPE, cwd=PROJECT,
                            env={**os.environ, "COLUMNS": "160", "LINES": "50", "TERM": "xterm-256color"})
    os.close(slave)
    out, deadline, sent = b"", time.monotonic() + 60, False
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    out += os.read(master, 1 << 16)
                except OSError:
                    break
            if not sent and b"vdev queue" in out:
                os.write(master, b"q")
                sent = True
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = out.decode(errors="replace")
    assert sent and proc.returncode == 0, (proc.returncode, proc.stderr.read().decode()[-2000:], text[-2000:])
    assert text.index("\x1b[?1049h") < text.index("txg sync") < text.rindex("\x1b[?1049l")
    assert "\x1b[?25l" in text and text.rindex("\x1b[?25h") > text.rindex("\x1b[H")
