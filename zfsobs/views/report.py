"""Reports of a capture: text for people, JSON and CSV for scripts. Built by feeding the capture
through the same parser and model as the live view, with no row limit."""
from __future__ import annotations

import csv
import io
import itertools
import json
from typing import IO

from zfsobs import safe
from zfsobs.capture import Capture
from zfsobs.events import Parser
from zfsobs.model import Model
from zfsobs.model import vdev_queue as vqm
from zfsobs.model.txg import DELAY_BUCKETS
from zfsobs.model.vdev_cache import derive
from zfsobs.model.zil import lat_bounds
from zfsobs.views.ledger import Ledger
from zfsobs.views.na import blank, dash, unavailable
from zfsobs.views.units import ms, mib, size

SECTIONS = ("txgs", "zil", "vdev_queue", "vdev_cache")


STREAMED = ("txgs", "zil")      # sections with a row per txg: read back from the ledger as they are written
MARK = "\x00rows of "             # where a streamed section's rows go in the dumped JSON


def build(capture: Capture, samples: bool = True, digests: bool = True, rows: bool = True) -> tuple[Model, Parser]:
    """The whole capture's model, its txg and ZIL rows in a ledger (model.ledger; rows=False: their
    statistics only). Without time-binned samples, a digest stands for the counter lines it covers
    (zfsobs/capture/digest.py): the same whole-capture figures, O(records)."""
    parser = Parser()
    model = Model(keep=None, samples=samples, counters=samples, ledger=Ledger(rows))
    feed = model.feed
    for ev in capture.events(parser, digests=digests and not samples):   # streamed: a week is GBs of lines
        feed(ev)
    model.ledger.take_rest(model)
    return model, parser


def sections(capture: Capture, built: tuple[Model, Parser] | None = None) -> dict:
    """The report's data; each STREAMED section is a function that yields its rows (None when
    built with rows=False). `built` is build(capture) when the caller has it (tests, scripts/bench-ingest)."""
    model, parser = built or build(capture, samples=False)
    ledger = model.ledger
    meta = dict(capture.meta)
    meta.update(events=parser.events, malformed=parser.malformed, lost=model.lost,
                lost_by_probe=dict(model.lost_by_probe),
                duration_ns=(model.last_ts - model.first_ts) if model.events else 0,
                trailer=capture.trailer, warnings=capture.warnings)
    summary = {pool: ledger.txg_stats[pool].result(pool, model.txg.throttled) for pool in sorted(ledger.txg_stats)}
    zil_summary = {}
    for pool in sorted(ledger.zil_stats):
        st = ledger.zil_stats[pool].result(pool)
        st["lat_hist"] = [{"low_ns": lat_bounds(i)[0], "high_ns": _finite(lat_bounds(i)[1]), "count": n}
                          for i, n in enumerate(st["lat_hist"]) if n]
        st["max_rate_nused"] = model.zil.pools[pool].busiest_second()
        zil_summary[pool] = st
    vq_rows, vq_summary = _vdev_queue(model)
    vc_rows, vc_summary = _vdev_cache(model, meta)
    # kstat mode: what the source could not give is null, not 0
    zna, qna, cna, tna = (unavailable(model, p) for p in ("zil", "vdev_queue", "vdev_cache", "throttle"))
    for st in summary.values():
        st["throttle"] = st["throttle"] and blank(st["throttle"], tna)
    zil_summary = {p: blank(st, zna) for p, st in zil_summary.items()}
    vq_rows = [blank(r, qna) for r in vq_rows]
    vq_summary = {p: {c: blank(st, qna) for c, st in classes.items()} for p, classes in vq_summary.items()}
    vc_rows = [blank(r, cna) for r in vc_rows]
    vc_summary["pools"] = {p: blank(st, cna) for p, st in vc_summary["pools"].items()}
    meta["unavailable_fields"] = {p: sorted(model.na[p]) for p in sorted(model.na)}

    def txg_rows():
        for pool in sorted(ledger.txg_stats):
            for r in ledger.rows("txgs", pool):
                if model.txg.throttled and r["delay_count"] is None:
                    # with the throttle traced, a txg with no throttle line had nothing delayed or waiting
                    r.update(delay_count=0, delay_ns=0, delay_max_ns=0, delay_hist=[0] * DELAY_BUCKETS,
                             txwait_count=0, txwait_ns=0)
                yield blank(r, tna)

    def zil_rows():
        for pool in sorted(ledger.zil_stats):
            for r in ledger.rows("zil", pool):
                yield blank(r, zna)
    rows = ledger.keeps_rows
    return {"meta": meta, "txgs": txg_rows if rows else None, "zil": zil_rows if rows else None, "vdev_queue": vq_rows,
            "vdev_cache": vc_rows,
            "summary": {"txg": summary, "zil": zil_summary, "vdev_queue": vq_summary, "vdev_cache": vc_summary}}


def as_dict(capture: Capture, built: tuple[Model, Parser] | None = None) -> dict:
    """The report's data with every row in memory: for tests and small captures."""
    return {k: list(v()) if k in STREAMED else v for k, v in sections(capture, built).items()}


def _vdev_cache(model: Model, meta: dict) -> tuple[list[dict], dict]:
    """A row per vdev incarnation; the state (active/disabled/absent/unknown) and per-pool figures."""
    state, why = model.vc.state(meta.get("unavailable", {}).get("vdev_cache"))
    def figures(t: dict) -> dict:
        return {k: _round(x) if isinstance(x, float) else x for k, x in derive(t).items()}
    rows = [{"pool": v.pool, "pid": v.pid, "vdev": v.path, "guid": v.guid, "size": v.size, "max": v.max,
             "bshift": v.bshift, **figures(t)} for v, t in model.vc.rows()]
    pools = {pool: figures(t) for pool, t in sorted(model.vc.by_pool().items())}
    return rows, {"state": state, "why": why, "pools": pools}


def _vdev_queue(model: Model) -> tuple[list[dict], dict]:
    """A row per (process, vdev, class) the capture saw; a summary per pool and class."""
    rows, summary = [], {}
    for vdev, s, t in model.vq.totals():
        wait, dev = s.hist[0], s.hist[1]
        row = {"pool": vdev.pool, "pid": vdev.pid, "vdev": vdev.path, "guid": vdev.guid,
               "class": vqm.CLASSES[s.cls], "max_active": s.max_active, "min_active": s.min_active}
        row.update({k: t[k] for k in ("enq", "enq_bytes", "issued", "merged", "aggs", "done", "done_bytes",
                                      "untracked", "untracked_act", "unseen")})
        row.update(pend_mean=_round(t["pend_mean"]), pend_max=t["pend_max"], act_mean=_round(t["act_mean"]),
                   act_max=t["act_max"], seconds=round(t["seconds"], 3),
                   wait_mean_ns=t["wait_ns"] // (t["issued"] + t["merged"]) if t["issued"] + t["merged"] else None,
                   wait_p50_ns=vqm.quantile(wait, 0.5), wait_p99_ns=vqm.quantile(wait, 0.99),
                   dev_mean_ns=t["dev_ns"] // t["done"] if t["done"] else None,
                   dev_p50_ns=vqm.quantile(dev, 0.5), dev_p99_ns=vqm.quantile(dev, 0.99))
        rows.append(row)
        agg = summary.setdefault(vdev.pool, {}).setdefault(vqm.CLASSES[s.cls], {
            "vdevs": set(), "enq": 0, "done": 0, "merged": 0, "aggs": 0, "done_bytes": 0, "wait_ns": 0,
            "dev_ns": 0, "untracked": 0, "unseen": 0, "waits": 0, "act_max": 0, "pend_max": 0, "max_active": set(),
            "wait_hist": [0] * vqm.BUCKETS, "dev_hist": [0] * vqm.BUCKETS})
        agg["vdevs"].add(vdev.path)
        if s.max_active is not None:
            agg["max_active"].add(s.max_active)
        for k in ("enq", "done", "merged", "aggs", "done_bytes", "wait_ns", "dev_ns", "untracked", "unseen"):
            agg[k] += t[k]
        agg["waits"] += t["issued"] + t["merged"]
        agg["act_max"] = max(agg["act_max"], t["act_max"])
        agg["pend_max"] = max(agg["pend_max"], t["pend_max"])
        agg["wait_hist"] = [a + b for a, b in zip(agg["wait_hist"], wait)]
        agg["dev_hist"] = [a + b for a, b in zip(agg["dev_hist"], dev)]
    for classes in summary.values():
        for agg in classes.values():
            agg["vdevs"] = len(agg["vdevs"])
            agg["max_active"] = sorted(agg["max_active"])     # processes may differ (zdb raises async_read)
            agg["wait_mean_ns"] = agg["wait_ns"] // agg["waits"] if agg["waits"] else None
            agg["dev_mean_ns"] = agg["dev_ns"] // agg["done"] if agg["done"] else None
            for kind in ("wait", "dev"):
                hist = agg.pop(kind + "_hist")
                agg[kind + "_p50_ns"], agg[kind + "_p99_ns"] = vqm.quantile(hist, 0.5), vqm.quantile(hist, 0.99)
    return rows, summary


def _round(x):
    return None if x is None else round(x, 3)


def _finite(x: float):
    return None if x == float("inf") else int(x)


def write(capture: Capture, fmt: str, out: IO[str], section: str = "txgs",
          built: tuple[Model, Parser] | None = None) -> None:
    """The report, written to `out` as it is made: a week's rows never sit in memory together."""
    built = built or build(capture, samples=False, rows=fmt != "text")
    try:
        data = sections(capture, built)
        if fmt == "json":
            _write_json(data, out)
        elif fmt == "csv":
            _write_csv(data[section]() if section in STREAMED else data[section], out)
        else:
            out.write(_text(data))
    finally:
        built[0].ledger.close()


def render(capture: Capture, fmt: str, section: str = "txgs") -> str:
    out = io.StringIO()
    write(capture, fmt, out, section)
    return out.getvalue()


def _write_json(data: dict, out: IO[str]) -> None:
    """json.dumps(data, indent=1) byte for byte, the STREAMED sections' rows written one by one
    where a mark stands in the dump of the rest."""
    head, streams = {}, {}
    for key, value in data.items():
        if key in STREAMED:
            rows = value()
            first = next(rows, None)
            if first is not None:
                streams[key] = itertools.chain([first], rows)
            value = [MARK + key] if first is not None else []
        head[key] = value
    rest = json.dumps(head, indent=1, sort_keys=False)
    for key, rows in streams.items():
        before, rest = rest.split(json.dumps(MARK + key), 1)
        out.write(before)
        for i, row in enumerate(rows):
            # a row is two levels deep: each of its lines gets two more spaces
            out.write((",\n  " if i else "") + json.dumps(row, indent=1).replace("\n", "\n  "))
    out.write(rest + "\n")


def _write_csv(rows, out: IO[str]) -> None:
    """A row per line; a list (a histogram) is a column per bucket: name0, name1, ... Each cell
    is safe.cell()'s (None: empty): a name from the capture is never a formula."""
    writer = None
    for r in rows:
        flat = {k2: safe.cell(v2) if isinstance(v2, str) else v2 for k, v in r.items()
                for k2, v2 in ([(f"{k}{i}", x) for i, x in enumerate(v)] if isinstance(v, list) else [(k, v)])}
        if writer is None:
            writer = csv.DictWriter(out, fieldnames=list(flat), lineterminator="\n")
            writer.writeheader()
        writer.writerow(flat)


# quantiles that are a latency histogram's bucket upper bound: "≤", as the live view marks them
BUCKET_BOUNDS = ("lat_p50_ns", "lat_p99_ns", "wait_p99_ns", "dev_p99_ns")


def bound(ns: float | None, digits: int = 3) -> str:
    """A quantile that is its histogram bucket's upper bound, marked ≤ (the value is at most this)."""
    return "-" if ns is None else "≤" + ms(ns, digits)


def _text(data: dict) -> str:
    meta = data["meta"]
    target = meta.get("target", {})
    lines = [f"zfsobs report: {meta.get('host', '?')}  {target.get('kind', '?')} OpenZFS "
             f"{target.get('zfs_version', '?')}  {target.get('path', '')}".rstrip(),
             f"duration {meta['duration_ns'] / 1e9:.1f} s   events {meta['events']}   "
             f"malformed {meta['malformed']}   lost {meta['lost']}"]
    if meta.get("source") == "kstat":
        why = meta.get("kstat", {}).get("why")
        lines.append("source: kstat mode, ZFS's own counters" + (f" ({why})" if why else "")
                     + "; '-' is what only tracing can show (docs/kstat.md)")
    for warning in meta["warnings"]:
        lines.append(f"warning: {warning}")
    if meta["lost"]:
        by = ", ".join(f"{n} {p}" for p, n in sorted(meta["lost_by_probe"].items()))
        lines.append(f"warning: {meta['lost']} events lost ({by}): bpftrace's perf buffer overflowed, "
                     "so the rows and counts they carried are missing")
    # the pool column fits the longest pool name (and at least the headers' labels)
    longest = max(map(len, _pools(data)), default=0)
    w = max(20, longest + 1)
    lines.append("")
    lines.append(widen("txg sync (ms)          txgs      p50      p95      p99      max   interval p50/mean/p99 ms"
                 "   dirty MiB mean/max", 20, w))
    for pool, st in data["summary"]["txg"].items():
        s, iv, d = st["sync_ns"], st["interval_ns"], st["dirty_bytes"]
        lines.append(f"{pool:<{w}} {st['txgs']:>6} {ms(s['p50'], 3):>8} {ms(s['p95'], 3):>8} "
                     f"{ms(s['p99'], 3):>8} {ms(s['max'], 3):>8}   "
                     f"{ms(iv['p50'])}/{ms(iv['mean'])}/{ms(iv['p99'])}".ljust(80 + w - 20)
                     + f"   {mib(d['mean'])}/{mib(d['max'])}")
    if not data["summary"]["txg"]:
        lines.append("(no txg synced in this capture)")
    lines += _throttle_text(data["summary"]["txg"], w)
    lines.append("")
    zw = max(18, longest + 1)
    lines.append(widen("ZIL                 txgs  commits  lat mean/p50/p99/max ms          itxs  lwbs     N-Bytes     "
                 "B-Bytes  <=4kB 4-32kB >=32kB", 18, zw))
    for pool, st in data["summary"]["zil"].items():
        lat = "/".join((bound if k in BUCKET_BOUNDS else ms)(st[k], 3)
                       for k in ("lat_mean_ns", "lat_p50_ns", "lat_p99_ns", "lat_max_ns"))
        nbytes = "-" if st["size"] is None else size(st["size"])
        lines.append(f"{pool:<{zw}} {st['txgs']:>5} {st['commits']:>8}  {lat:<30} {dash(st['itxs']):>6} {st['lwbs']:>5} "
                     f"{size(st['nused']):>11} {nbytes:>11} {dash(st['lwb_le4k']):>6} {dash(st['lwb_4to32k']):>6} "
                     f"{dash(st['lwb_ge32k']):>6}")
    if not data["summary"]["zil"]:
        lines.append("(no ZIL activity in this capture)")
    lines.append("")
    lines.append(widen("vdev queue           class         vdevs     I/Os   merged  act max/limit  pend max"
                 "   wait mean/p99 ms   device mean/p99 ms", 20, w))
    for pool, classes in data["summary"]["vdev_queue"].items():
        for name, st in classes.items():
            limit = ",".join(map(str, st["max_active"])) or "?"
            lines.append(f"{pool:<{w}} {name:<13} {st['vdevs']:>5} {dash(st['enq']):>8} {dash(st['merged']):>8} "
                         f"{st['act_max']:>7}/{limit:<5} {st['pend_max']:>9}   "
                         f"{ms(st['wait_mean_ns'], 3):>7}/{bound(st['wait_p99_ns'], 3):<9} "
                         f"{ms(st['dev_mean_ns'], 3):>7}/{bound(st['dev_p99_ns'], 3)}")
    if not data["summary"]["vdev_queue"]:
        lines.append("(no vdev queue activity in this capture)")
    untracked = sum(st["untracked"] or 0 for c in data["summary"]["vdev_queue"].values() for st in c.values())
    if untracked:
        lines.append(f"warning: {untracked} queued I/Os were not followed (more in flight than the probe's "
                     "maps hold, BPFTRACE_MAP_KEYS_MAX, or an I/O one of whose events the kernel skipped or "
                     "DTrace dropped); depths and counts exclude them")
    unseen = sum(st["unseen"] or 0 for c in data["summary"]["vdev_queue"].values() for st in c.values())
    if unseen:
        lines.append(f"warning: {unseen} device I/Os completed that the probe never saw issued (untracked, or "
                     "probe events the kernel dropped); done counts exclude them")
    vc = data["summary"]["vdev_cache"]
    lines += ["", f"vdev_cache: {vc['state']}: {vc['why']}"]
    if vc["state"] == "active":
        lines.append(widen("pool                    reads     hits   misses declined   asked(cached)  device(fills)"
                     "  inflation    net  all: device/asked", 20, w))
        for pool, st in vc["pools"].items():
            def x(v):
                return "-" if v is None else f"{v:.2f}x"
            asked = "-" if st["hit_bytes"] is None or st["miss_bytes"] is None else size(st["hit_bytes"] + st["miss_bytes"])
            lines.append(f"{pool:<{w}} {dash(st['reads']):>8} {st['hits']:>8} {st['misses']:>8} {dash(st['declined']):>8} "
                         f"{asked:>15} {size(st['fill_bytes']):>14} "
                         f"{x(st['inflation']):>10} {x(st['net']):>6} {x(st['amplification']):>18}")
    # the names, host, paths and warnings in them come from the capture
    return "\n".join(map(safe.text, lines)) + "\n"


def _pools(data: dict) -> set[str]:
    summary = data["summary"]
    return set(summary["txg"]) | set(summary["zil"]) | set(summary["vdev_queue"]) | set(summary["vdev_cache"]["pools"])


def widen(header: str, at: int, width: int) -> str:
    """HEADER with its pool column (AT characters from the left) grown to WIDTH."""
    return header[:at] + " " * (width - at) + header[at:]


def _throttle_text(summary: dict, w: int = 20) -> list[str]:
    """The write throttle per pool (docs/txg.md), when it was traced."""
    pools = {p: st["throttle"] for p, st in summary.items() if st.get("throttle")}
    if not pools:
        return []
    lines = ["", widen("write throttle        txgs delayed  transactions delayed  delay total s  mean/max ms"
                       "   dirty % of max p50/p99/max   txg waits", 20, w)]
    for pool, th in pools.items():
        d = th["dirty_pct"] or {}     # None: kstat mode counts delays only (docs/kstat.md)
        pct = "/".join("-" if d.get(k) is None else f"{d[k]:.0f}" for k in ("p50", "p99", "max"))
        total = "-" if th["delay_ns"] is None else f"{th['delay_ns'] / 1e9:.3f}"
        lines.append(f"{pool:<{w}} {th['txgs_delayed']:>5}/{th['txgs']:<6} {th['delay_count']:>20} "
                     f"{total:>14}  {ms(th['delay_mean_ns'], 3)}/{ms(th['delay_max_ns'], 3)}".ljust(88 + w - 20)
                     + f"{pct:>18}   {dash(th['txwait_count']):>9}")
    return lines

