"""Reports of a capture: text for people, JSON and CSV for scripts. Built by feeding the capture
through the same parser and model as the live view, with no row limit."""
from __future__ import annotations

import csv
import io
import json

from zfsobs.capture import Capture
from zfsobs.events import Parser, parse_all
from zfsobs.model import Model
from zfsobs.model.zil import lat_bounds
from zfsobs.views.units import ms, mib, size

SECTIONS = ("txgs", "zil")


def build(capture: Capture) -> tuple[Model, Parser]:
    parser = Parser()
    model = Model(keep=None)
    for ev in parse_all(capture.lines, parser):
        model.feed(ev)
    return model, parser


def as_dict(capture: Capture) -> dict:
    model, parser = build(capture)
    meta = dict(capture.meta)
    meta.update(events=parser.events, malformed=parser.malformed, lost=model.lost,
                duration_ns=(model.last_ts - model.first_ts) if model.events else 0,
                trailer=capture.trailer, warnings=capture.warnings)
    rows = [r.as_dict() for pool in sorted(model.txg.pools) for r in model.txg.pools[pool].rows]
    summary = {pool: model.txg.stats(pool, list(model.txg.pools[pool].rows)) for pool in sorted(model.txg.pools)}
    zil = model.zil
    zil_rows = [r for p in sorted(zil.pools) for r in zil.pools[p].order]
    zil_summary = {}
    for pool in sorted(zil.pools):
        st = zil.stats(pool, list(zil.pools[pool].order))
        st["lat_hist"] = [{"low_ns": lat_bounds(i)[0], "high_ns": _finite(lat_bounds(i)[1]), "count": n}
                          for i, n in enumerate(st["lat_hist"]) if n]
        span = zil.pools[pool].flow
        st["max_rate_nused"] = zil.pools[pool].max_rate(span[0][0] - 1, span[-1][0]) if span else 0.0
        zil_summary[pool] = st
    return {"meta": meta, "txgs": rows, "zil": [r.as_dict() for r in zil_rows],
            "summary": {"txg": summary, "zil": zil_summary}}


def _finite(x: float):
    return None if x == float("inf") else int(x)


def render(capture: Capture, fmt: str, section: str = "txgs") -> str:
    data = as_dict(capture)
    if fmt == "json":
        return json.dumps(data, indent=1, sort_keys=False) + "\n"
    if fmt == "csv":
        rows = data[section]
        out = io.StringIO()
        if rows:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in rows)
        return out.getvalue()
    return _text(data)


def _text(data: dict) -> str:
    meta = data["meta"]
    target = meta.get("target", {})
    lines = [f"zfsobs report: {meta.get('host', '?')}  {target.get('kind', '?')} OpenZFS "
             f"{target.get('zfs_version', '?')}  {target.get('path', '')}".rstrip(),
             f"duration {meta['duration_ns'] / 1e9:.1f} s   events {meta['events']}   "
             f"malformed {meta['malformed']}   lost {meta['lost']}"]
    for warning in meta["warnings"]:
        lines.append(f"warning: {warning}")
    lines.append("")
    lines.append("txg sync (ms)          txgs      p50      p95      p99      max   interval p50/mean/p99 ms"
                 "   dirty MiB mean/max")
    for pool, st in data["summary"]["txg"].items():
        s, iv, d = st["sync_ns"], st["interval_ns"], st["dirty_bytes"]
        lines.append(f"{pool:<20} {st['txgs']:>6} {ms(s['p50'], 3):>8} {ms(s['p95'], 3):>8} "
                     f"{ms(s['p99'], 3):>8} {ms(s['max'], 3):>8}   "
                     f"{ms(iv['p50'])}/{ms(iv['mean'])}/{ms(iv['p99'])}".ljust(80)
                     + f"   {mib(d['mean'])}/{mib(d['max'])}")
    if not data["summary"]["txg"]:
        lines.append("(no txg synced in this capture)")
    lines.append("")
    lines.append("ZIL                 txgs  commits  lat mean/p50/p99/max ms          itxs  lwbs     N-Bytes     "
                 "B-Bytes  <=4kB 4-32kB >=32kB")
    for pool, st in data["summary"]["zil"].items():
        lat = "/".join(ms(st[k], 3) for k in ("lat_mean_ns", "lat_p50_ns", "lat_p99_ns", "lat_max_ns"))
        lines.append(f"{pool:<18} {st['txgs']:>5} {st['commits']:>8}  {lat:<30} {st['itxs']:>6} {st['lwbs']:>5} "
                     f"{size(st['nused']):>11} {size(st['size']):>11} {st['lwb_le4k']:>6} {st['lwb_4to32k']:>6} "
                     f"{st['lwb_ge32k']:>6}")
    if not data["summary"]["zil"]:
        lines.append("(no ZIL activity in this capture)")
    return "\n".join(lines) + "\n"
