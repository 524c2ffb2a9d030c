"""The live TUI: redraws the screen every --interval seconds (at least 2 Hz), space pauses the display while
recording continues, q quits. Without a terminal the session prints line mode instead."""
from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live

from zfsobs.session import Session
from zfsobs.views.keys import Keys
from zfsobs.views.screen import render_screen


def run_live(session: Session, console: Console) -> None:
    status = session.status
    with Keys() as keys, Live(console=console, screen=True, auto_refresh=False,
                              redirect_stderr=False) as live:
        def draw() -> None:
            live.update(render_screen(session.model, status, console.height, time.monotonic_ns()),
                        refresh=True)

        def on_tick() -> bool:
            key = keys.read(0)
            while key:
                if key in ("q", "Q"):
                    return False
                if key == " ":
                    status.paused = not status.paused
                    draw()
                key = keys.read(0)
            if not status.paused:
                draw()
            return True

        draw()
        session.run(on_tick, tick=min(session.args.interval, 0.5))
