"""The border around each panel of the screen: rich's Panel as the screen uses it (rounded, full
width, one space of padding left and right, a title in the top edge), drawn around the content's
lines directly. Panel renders its content through a Padding, which lays every line out a second
time: about a quarter of a busy lab's frame (scripts/bench-frame). Titles are plain text."""
from __future__ import annotations

from rich.segment import Segment
from rich.style import Style

BORDER = Style()


class Box:
    def __init__(self, renderable, title: str = "", title_align: str = "center"):
        self.renderable, self.title, self.title_align = renderable, title, title_align

    def __rich_console__(self, console, options):
        for line in self.lines(console, options):
            yield from line
            yield Segment.line()

    def lines(self, console, options) -> list[list[Segment]]:
        """The box's lines, each the full width: the screen takes them as they are, not split again."""
        width = options.max_width
        inner = options.update(width=max(1, width - 4), height=None)
        left, right = Segment("│ ", BORDER), Segment(" │", BORDER)
        return [[Segment(self._top(width), BORDER)],
                *([left, *line, right] for line in console.render_lines(self.renderable, inner, pad=True)),
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
