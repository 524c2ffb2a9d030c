"""The header: target, ZFS version, pools, event rate, malformed/lost counts, what tracing costs,
recording/replay."""
from __future__ import annotations

from rich.table import Table
from rich.text import Text

from zfsobs import __version__
from zfsobs import safe
from zfsobs.model import Model
from zfsobs.views.status import Status
from zfsobs.views import goto
from zfsobs.views.units import size, wallclock


def render_header(model: Model, status: Status, now_ns: int | None) -> Table:
    meta = status.meta
    target = meta.get("target", {})
    grid = Table.grid(expand=True, padding=(0, 2))
    # one screen line per row: a narrow terminal cuts the ends off, it does not push the panels down
    grid.add_column(ratio=3, no_wrap=True, overflow="ellipsis")
    grid.add_column(ratio=2, justify="right", no_wrap=True, overflow="ellipsis")
    where = f"{target.get('kind', '?')} · OpenZFS {target.get('zfs_version', '?')}"
    if target.get("path"):
        where += f" · {target['path']}"
    # every string here but the labels comes from the capture, the traced system or an error
    where = safe.text(where)
    title = Text.assemble(("zfsobs ", "bold cyan"), (safe.text(meta.get("zfsobs", __version__)), "cyan"),
                          "  ", (where, "bold"))
    # the demo's lab names itself: its own tunables (a small dirty limit) are what move the throttle
    lab = "demo lab · " if (meta.get("lab") or {}).get("workload") == "demo" else ""
    grid.add_row(title, Text(safe.text(f"{lab}{meta.get('host', '')} · {meta.get('source', '')} "
                                       f"{meta.get('bpftrace', '')}"), style="dim"))
    pools = safe.text(", ".join(sorted(model.txg.pools)) or "(none yet)")
    counts = Text.assemble(
        f"pools: {pools}   events {model.events} ({model.events_per_second(now_ns):.0f}/s)   ",
        ("malformed ", ""), (str(status.malformed), "bold red" if status.malformed else ""),
        ("   lost ", ""), (str(model.lost), "bold red" if model.lost else ""))
    grid.add_row(counts, _mode_text(status))
    if meta.get("source") == "kstat":
        why = meta.get("kstat", {}).get("why", "")
        grid.add_row(Text(safe.text(f"kstat mode: ZFS's own counters, '-' needs tracing ({why})"), style="yellow"), "")
    if status.cost and status.mode == "live":
        grid.add_row(Text(status.cost, style="dim"), "")
    for line in ([status.message] if status.message else []) + status.warnings[:2]:
        grid.add_row(Text(safe.text(line), style="yellow"), "")
    return grid


def _mode_text(status: Status) -> Text:
    if status.mode == "replay":
        if status.prompt is not None:
            return Text(f"go to: {safe.text(status.prompt)}▏ {goto.FORMS}; Enter, Esc", style="bold magenta")
        pos = end = "-"
        if status.cursor_ns is not None and status.end_ns is not None:
            at = wallclock(status.meta, (status.start_ts or 0) + status.cursor_ns)[:8]
            pos = f"{at} +{goto.clock_offset(status.cursor_ns)}"
            end = goto.clock_offset(status.end_ns)
        state = "PAUSED" if status.paused else f"▶ ×{status.speed:g}"
        return Text(f"REPLAY {pos} / {end}  {state}   space t T j g r + - q", style="bold magenta")
    parts = []
    if status.recording:
        parts.append((f"● REC {status.recording} ({size(status.recorded_bytes)})", "bold red"))
    paused = "  PAUSED (recording continues)" if status.recording else "  PAUSED"
    parts.append((paused if status.paused else "  LIVE", "bold green"))
    parts.append(("   space pause  q quit" if status.keys else "   Ctrl-C quits", "dim"))
    return Text.assemble(*parts)
