"""The vdev_cache panel. Usually one line: the cache is disabled (zfs_vdev_cache_size=0) or absent
(OpenZFS >= 2.2), and the panel says which. When it is on: per pool and busiest vdevs, over the last
second, the reads offered, how they went (hit, miss, declined), the bytes the reads asked for
against the bytes the device read for them, and the inflation a miss costs."""
from __future__ import annotations

import os

from rich.console import Group
from rich.text import Text

from zfsobs import safe
from zfsobs.model import Model
from zfsobs.model.vdev_cache import derive
from zfsobs.views.box import Box
from zfsobs.views.na import blank
from zfsobs.views.na import unavailable as na_fields
from zfsobs.views.phrases import Phrases
from zfsobs.views.units import NumericTable, size

WINDOW_S = 1.0
COLUMNS = ("pool / vdev", "reads/s", "hit%", "miss/s", "declined/s", "asked (cached)", "device (fills)", "inflation",
           "net", "all reads: device/asked")
STYLE = {"active": "bold green", "disabled": "yellow", "absent": "dim", "unknown": "dim"}


def render_vc(model: Model, meta: dict, rows: int, now_ns: int | None) -> Box:
    unavailable = meta.get("unavailable", {}).get("vdev_cache")
    state, why = model.vc.state(unavailable)
    # the state and why, in phrases ("; " parts them): a short terminal keeps the first line
    words = safe.text(why).split("; ")
    style = "dim" if state != "active" else ""
    head = Phrases(None, [Text.assemble((f"{state}: ", STYLE[state]), (words[0], style)),
                          *(Text(w, style=style) for w in words[1:])], sep="; ", max_lines=1 if rows <= 0 else 2)
    title = "vdev_cache"
    if state != "active":
        if "vdev_cache" not in model.probes and not unavailable and state == "unknown":
            head = Phrases(None, [Text("vdev_cache probe not running (see the status line)", style="dim")])
        return Box(head, title=title, title_align="left")
    end = now_ns if now_ns is not None else model.vc.last_ts
    t0 = end - int(WINDOW_S * 1e9)
    na = na_fields(model, "vdev_cache")        # kstat mode: hits and misses, no bytes asked
    lines = []
    for pool, w in sorted(model.vc.by_pool(t0, end).items()):
        if not w["reads"]:
            continue            # a pool gone or idle
        lines.append(_cells(pool, blank(derive(w), na), bold=True))
        vdevs = [(v, v.window(t0, end)) for v in model.vc.vdevs.values() if v.pool == pool]
        vdevs = sorted(((v, w) for v, w in vdevs if w and w["reads"] > 0), key=lambda x: -x[1]["reads"])
        for v, w in vdevs[:max(0, rows - 1 - len(lines))]:     # the header and this pool's line
            lines.append(_cells("  " + os.path.basename(v.path), blank(derive(w), na)))
    table = NumericTable(COLUMNS, lines, drop=("all reads: device/asked", "asked (cached)", "declined/s",
                                              "device (fills)", "miss/s"), left=(COLUMNS[0],))
    # a short terminal (rows 0): the pools' lines say it is active; the settings go
    return Box(Group(*([head] if rows > 0 else []), table), title=f"{title}, last {WINDOW_S:g} s", title_align="left")


def _cells(name: str, d: dict, bold: bool = False) -> list:
    def x(v):
        return "-" if v is None else f"{v:.2f}x"

    def n(v):
        return "-" if v is None else f"{v:.0f}"
    infl = d["inflation"]
    asked = None if d["hit_bytes"] is None or d["miss_bytes"] is None else d["hit_bytes"] + d["miss_bytes"]
    return [Text(safe.text(name), style="bold" if bold else ""), n(d["reads"]),
            "-" if d["hit_ratio"] is None else f"{100 * d['hit_ratio']:.0f}",
            n(d["misses"]), n(d["declined"]),
            "-" if asked is None else size(asked) + "/s", size(d["fill_bytes"]) + "/s",
            Text(x(infl), style="bold red" if infl and infl >= 2 else ""),
            Text(x(d["net"]), style="red" if d["net"] and d["net"] > 1 else "green" if d["net"] else ""),
            x(d["amplification"])]
