"""The whole screen, the same for live and replay: header, then one panel per metric."""
from __future__ import annotations

from rich.console import Group
from rich.panel import Panel

from zfsobs.model import Model
from zfsobs.views.header import render_header
from zfsobs.views.status import Status
from zfsobs.views.txg_panel import render_txg


def render_screen(model: Model, status: Status, height: int, now_ns: int | None = None) -> Group:
    pools = max(1, len(model.txg.pools))
    rows = max(3, (height - 8) // pools - 4)
    return Group(Panel(render_header(model, status, now_ns)), render_txg(model.txg, rows))
