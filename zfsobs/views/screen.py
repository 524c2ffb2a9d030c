"""The whole screen, the same for live and replay: header, the tuning panel once a tunable changed,
then one panel per metric (and before any change a line with the watched tunables' values)."""
from __future__ import annotations

from rich.console import Group
from rich.panel import Panel

from zfsobs.model import Model
from zfsobs.views.header import render_header
from zfsobs.views.status import Status
from zfsobs.views.tuning_panel import height as tuning_height
from zfsobs.views.tuning_panel import render_tuning
from zfsobs.views.txg_panel import render_txg
from zfsobs.views.vc_panel import render_vc
from zfsobs.views.vq_panel import render_vq
from zfsobs.views.zil_panel import render_zil


def render_screen(model: Model, status: Status, height: int, now_ns: int | None = None) -> Group:
    panels = 3
    changed = model.tuning.latest is not None
    # the tuning panel (a change's before/after) comes out of the three metric panels' shares,
    # rounded up per panel: their row counts are divided down from `body`. Before a change it is
    # one dim line, placed last: the first thing a short terminal crops (the rest needs ~31 lines)
    tune_rows = 6 if height >= 50 else 3 if height >= 38 else 1
    reserve = tuning_height(model, tune_rows) if changed or height >= 38 else 0
    body = max(12, height - 8 - panels * -(-reserve // panels))
    txg_pools = max(1, len(model.txg.pools))
    zil_pools = max(1, len(model.zil.pools))
    txg_rows = max(3, body // panels // txg_pools - 4)
    zil_rows = max(3, body // panels // zil_pools - 5)
    vq_rows = max(4, body // panels - 3)
    # the vdev_cache panel is one line unless the cache is on (then it takes a few vdev rows)
    vc_rows = 3 if model.vc.state()[0] == "active" else 0
    tuning = render_tuning(model, status.meta, tune_rows, now_ns)
    tuning = [tuning] if tuning is not None else []
    marks = [c.ts for c in model.tuning.changes]
    return Group(Panel(render_header(model, status, now_ns)), *(tuning if changed else []),
                 render_txg(model.txg, txg_rows, marks), render_zil(model, zil_rows, now_ns),
                 render_vq(model, max(4, vq_rows - vc_rows), now_ns),
                 render_vc(model, status.meta, vc_rows, now_ns), *([] if changed else tuning))
