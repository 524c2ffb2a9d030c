"""The terminal of the full-screen views (top, replay): the alternate screen, the cursor hidden,
each frame written from the top left as the screen's lines, padded to the terminal's size.
rich's Live(screen=True) laid every line of a frame out three times more (its Screen padded them,
its LiveRender and print's crop split them again), for lines the screen had already fitted.
Each segment's text reaches the terminal with no control character in it (zfsobs/safe.py): the
panels escape what they show, and a string one missed is escaped here, at the cost of its line's fit."""
from __future__ import annotations

from rich.console import Console
from rich.control import Control
from rich.segment import Segment

from zfsobs import safe
from zfsobs.views.screen import Screen


class Painter:
    def __init__(self, console: Console):
        self.console = console
        self.on = False

    def __enter__(self) -> "Painter":
        self.console.set_alt_screen(True)
        self.console.show_cursor(False)
        self.on = True
        return self

    def __exit__(self, *exc) -> None:
        """The terminal as it was; once only (a quit gives it back before the probes stop)."""
        if self.on:
            self.on = False
            self.console.show_cursor(True)
            self.console.set_alt_screen(False)

    def paint(self, screen: Screen) -> None:
        console = self.console
        width, height = console.size
        with console:        # one write to the terminal per frame
            console.control(Control.home())
            console.print(Frame(screen.lines(console, console.options), width, height), end="", crop=False)


class Frame:
    """Lines as a whole screen: each padded to the width (what the last frame left there goes),
    blank lines to the height, no newline after the last (it would scroll the screen)."""
    def __init__(self, lines: list[list[Segment]], width: int, height: int):
        self.lines, self.width, self.height = lines[:height], width, height

    def __rich_console__(self, console, options):
        new_line = Segment.line()
        for i, line in enumerate(self.lines):
            if i:
                yield new_line
            yield from map(_visible, line)
            short = self.width - Segment.get_line_length(line)
            if short > 0:
                yield Segment(" " * short)
        blank = Segment(" " * self.width)
        for _ in range(self.height - len(self.lines)):
            yield new_line
            yield blank


def _visible(seg: Segment) -> Segment:
    return seg if seg.control or seg.text.isprintable() else Segment(safe.text(seg.text), seg.style, seg.control)
