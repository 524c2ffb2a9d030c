"""The header: target, ZFS version, pools, event rate, malformed/lost counts, what tracing costs,
recording/replay. Each row is phrases on the left and on the right; on a narrow terminal a row's
least telling phrases go (the library's path, zero malformed/lost counts, then the right's last
phrases), and a row that still does not fit wraps between phrases: no phrase is cut."""
from __future__ import annotations

from rich.text import Text

from zfsobs import __version__
from zfsobs import safe
from zfsobs.model import Model
from zfsobs.views.box import as_segments, fitted
from zfsobs.views.phrases import Phrases
from zfsobs.views.status import Status
from zfsobs.views import goto
from zfsobs.views.units import size, wallclock

SEP = "  "


def render_header(model: Model, status: Status, now_ns: int | None) -> "Header":
    meta = status.meta
    target = meta.get("target", {})
    # every string here but the labels comes from the capture, the traced system or an error
    where = [Text(safe.text(f"{target.get('kind', '?')} · OpenZFS {target.get('zfs_version', '?')}"), style="bold")]
    if target.get("path"):
        where.append(Text(safe.text(target["path"]), style="bold"))
    title = Text.assemble(("zfsobs ", "bold cyan"), (safe.text(meta.get("zfsobs", __version__)), "cyan"))
    host = [Text(safe.text(f"{meta.get('host', '')} · {meta.get('source', '')} {meta.get('bpftrace', '')}".strip()),
                 style="dim")]
    pools = Text(f"pools: {safe.text(', '.join(sorted(model.txg.pools)) or '(none yet)')}")
    events = Text(f"events {model.events} ({model.events_per_second(now_ns):.0f}/s)")
    counts = [Text.assemble((f"{name} ", ""), (str(n), "bold red" if n else "")) for name, n in
              (("malformed", status.malformed), ("lost", model.lost))]
    # a count that is not zero comes before the event rate: it is what a narrow terminal keeps
    left = [pools] + [c for c in counts if not c.plain.endswith(" 0")] + [events] + \
        [c for c in counts if c.plain.endswith(" 0")]
    # the demo's lab names itself: its own tunables (a small dirty limit) are what move the throttle
    lab = [Text("demo lab", style="dim")] if (meta.get("lab") or {}).get("workload") == "demo" else []
    rows = [([title, *where], lab + host), (left, _mode_parts(status))]
    notes = []
    if meta.get("source") == "kstat":
        why = meta.get("kstat", {}).get("why", "")
        notes.append(Phrases(None, [Text("kstat mode: ZFS's own counters, '-' needs tracing", style="yellow"),
                                    Text(safe.text(f"({why})"), style="yellow")], max_lines=1))
    if status.cost and status.mode == "live":
        notes.append(Phrases(None, [Text(p, style="dim") for p in status.cost.split(" · ")], sep=" · ", max_lines=1))
    for line in ([status.message] if status.message else []) + status.warnings[:2]:
        notes.append(Phrases(None, [Text(safe.text(line), style="yellow")], max_lines=2))
    return Header(rows, notes)


class Header:
    """Rows of (left phrases, right phrases), then note lines (Phrases), as lines of the width."""

    def __init__(self, rows: list[tuple[list[Text], list[Text]]], notes: list[Phrases]):
        self.rows, self.notes = rows, notes

    def __rich_console__(self, console, options):
        yield from as_segments(self.lines(console, options.max_width))

    def lines(self, console, width: int) -> list:
        out = [fitted(console, t, width) for left, right in self.rows for t in _row(left, right, width)]
        return out + [line for note in self.notes for line in note.lines(console, width)]


def _row(left: list[Text], right: list[Text], width: int) -> list[Text]:
    """One line, left phrases then right ones flush right; the last phrases go (the left's past its
    first, then the right's past its first) until it fits, or it wraps between phrases."""
    left, right = list(left), [r for r in right if r.plain]
    while True:
        lt, rt = Text(SEP).join(left), Text(SEP).join(right)
        gap = width - lt.cell_len - rt.cell_len
        if gap >= (2 if right else 0):
            return [Text.assemble(lt, " " * gap, rt) if right else lt]
        if len(left) > 1:
            left.pop()
        elif len(right) > 1:
            right.pop()
        else:
            return Phrases(None, left + right, max_lines=3).texts(width)


def _mode_parts(status: Status) -> list[Text]:
    """The mode as phrases, most telling first: recording, what is shown (live, paused, replay's position), then the keys."""
    if status.mode == "replay":
        if status.prompt is not None:
            return [Text(f"go to: {safe.text(status.prompt)}▏ {goto.FORMS}; Enter, Esc", style="bold magenta")]
        pos = end = "-"
        if status.cursor_ns is not None and status.end_ns is not None:
            at = wallclock(status.meta, (status.start_ts or 0) + status.cursor_ns)[:8]
            pos = f"{at} +{goto.clock_offset(status.cursor_ns)}"
            end = goto.clock_offset(status.end_ns)
        state = "PAUSED" if status.paused else f"▶ ×{status.speed:g}"
        return [Text(f"REPLAY {pos} / {end}  {state}", style="bold magenta"),
                Text("space t T j g r + - q", style="bold magenta")]
    parts = []
    if status.recording:
        parts.append(Text(f"● REC {status.recording} ({size(status.recorded_bytes)})", style="bold red"))
    paused = "PAUSED (recording continues)" if status.recording else "PAUSED"
    parts.append(Text(paused if status.paused else "LIVE", style="bold green"))
    parts.append(Text("space pause  q quit" if status.keys else "Ctrl-C quits", style="dim"))
    return parts


def _mode_text(status: Status) -> Text:
    """The mode on one line, as a wide terminal shows it."""
    parts = _mode_parts(status)
    if status.mode == "replay":
        return Text("   ").join(parts)
    return Text.assemble("  ", Text("   ").join(parts))
