"""The border around each panel of the screen: rich's Panel as the screen uses it (rounded, full
width, one space of padding left and right, a title in the top edge), drawn around the content's
lines directly. Panel renders its content through a Padding, which lays every line out a second
time: about a quarter of a busy lab's frame (scripts/bench-frame). Titles are plain text.
The content's own lines are taken as they are where it lays them out itself (the tables: `lines`),
or is one line that fits: rich's wrapping, dividing and cropping were most of a frame."""
from __future__ import annotations

from rich.console import Group
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

BORDER = Style()


class Box:
    """`frame` False: the content's lines alone, one space in from each side (a short terminal's header)."""
    def __init__(self, renderable, title: str = "", title_align: str = "center", frame: bool = True):
        self.renderable, self.title, self.title_align, self.frame = renderable, title, title_align, frame

    def __rich_console__(self, console, options):
        yield from as_segments(self.lines(console, options))

    def lines(self, console, options) -> list[list[Segment]]:
        """The box's lines, each the full width: the screen takes them as they are, not split again."""
        width = options.max_width
        inner = options.update(width=max(1, width - 4), height=None)
        left, right = Segment("│ ", BORDER), Segment(" │", BORDER)
        if not self.frame:
            left, right = Segment("  "), Segment("  ")
            return [[left, *line, right] for line in content_lines(console, self.renderable, inner)]
        return [[Segment(self._top(width), BORDER)],
                *([left, *line, right] for line in content_lines(console, self.renderable, inner)),
                [Segment("╰" + "─" * (width - 2) + "╯", BORDER)]]

    def _top(self, width: int) -> str:
        room = width - 2
        title = f" {self.title} " if self.title else ""
        if len(title) > room - 2:
            title = title[:max(0, room - 3)] + "… " if room > 4 else ""
        if not title:
            return "╭" + "─" * room + "╮"
        spare = room - len(title)
        before = 1 if self.title_align == "left" else spare // 2
        return "╭" + "─" * before + title + "─" * (spare - before) + "╮"


def content_lines(console, renderable, options) -> list[list[Segment]]:
    """A panel's content as lines of the options' width, as console.render_lines(pad=True) makes them."""
    width = options.max_width
    if isinstance(renderable, Group):
        return [line for part in renderable.renderables for line in content_lines(console, part, options)]
    if hasattr(renderable, "lines"):          # a table that lays out its own lines (views/units.py)
        return renderable.lines(console, width)
    if isinstance(renderable, Text) and renderable.justify in (None, "default", "left") \
            and "\n" not in renderable.plain and renderable.cell_len <= width:
        return [fitted(console, renderable, width)]
    return console.render_lines(renderable, options, pad=True)


def fitted(console, line: Text, width: int) -> list[Segment]:
    """One line of text as segments, padded (or cropped) to the width. (Text.render leaves out the
    Text's own style when it has no spans; rich's layout had made it one.)"""
    if line.spans or not line.style:
        return Segment.adjust_line_length(list(line.render(console)), width)
    return Segment.adjust_line_length([Segment(line.plain, console.get_style(line.style))], width)


def as_segments(lines: list[list[Segment]]):
    """Lines as a renderable's segments (for rich), each ended by a newline."""
    for line in lines:
        yield from line
        yield Segment.line()
