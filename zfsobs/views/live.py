"""The live TUI: redraws the screen every --interval seconds (default 1), space pauses the display while
recording continues, q quits. Without a terminal the session prints line mode instead."""
from __future__ import annotations

import time

from rich.console import Console

from zfsobs.session import Session
from zfsobs.views.keys import Keys
from zfsobs.views.paint import Painter
from zfsobs.views.screen import Fit, render_screen

KEY_S = 0.2     # how often keys are read


def run_live(session: Session, console: Console) -> None:
    status = session.status
    with Keys() as keys, Painter(console) as painter:
        status.keys = keys.fd is not None
        fit = Fit()

        def draw() -> None:
            painter.paint(render_screen(session.model, status, console.height, time.monotonic_ns(), fit))

        drawn = [time.monotonic()]

        def on_tick() -> bool:
            key = keys.read(0)
            while key:
                if key in ("q", "Q"):
                    # the terminal is the user's again at once: the probes' detach (seconds of
                    # bpftrace's uprobe teardown) and the capture's close follow off screen
                    painter.__exit__(None, None, None)
                    keys.__exit__(None, None, None)
                    console.file.flush()
                    return False
                if key == " ":
                    status.paused = not status.paused
                    draw()
                key = keys.read(0)
            # keys every KEY_S, the screen every --interval: a redraw is most of the view's CPU
            if not status.paused and time.monotonic() - drawn[0] >= session.args.interval:
                drawn[0] = time.monotonic()
                draw()
            return True

        draw()
        session.run(on_tick, tick=min(session.args.interval, KEY_S))
