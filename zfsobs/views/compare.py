"""`zfsobs report FILE --compare`: the capture split at tunable changes. Per segment its time span,
the tunables in force and per metric n/mean/p99/max; per change the ratio after/before of mean
and p99 (like PCP's pmdiff). docs/tuning.md, "Before and after a change"."""
from __future__ import annotations

import csv
import io
import json
import textwrap

from zfsobs import safe
from zfsobs.capture import Capture
from zfsobs.model.samples import order
from zfsobs.model.segments import compare, split, window_stats
from zfsobs.views import metrics
from zfsobs.views.report import build
from zfsobs.views.units import wallclock

CSV_FIELDS = ("segment", "start_s", "end_s", "opened_by", "pool", "metric", "n", "mean", "p99", "max",
              "ratio_mean", "ratio_p99")


def as_dict(capture: Capture) -> dict:
    model, parser = build(capture, rows=False)
    model.samples.settle()
    meta = capture.meta
    out = {"meta": {"host": meta.get("host"), "target": meta.get("target", {}), "events": parser.events,
                    "malformed": parser.malformed, "warnings": capture.warnings,
                    "duration_s": (model.last_ts - model.first_ts) / 1e9 if model.events else 0.0,
                    "tunables_initial": dict(model.tuning.initial)},
           "segments": [], "changes": []}
    if not model.events:
        return out
    first, last = model.first_ts, model.last_ts
    segs = split(first, last, model.tuning.changes)
    stats = [window_stats(model.samples.tracks, s.t0, s.t1) for s in segs]
    for s, st in zip(segs, stats):
        end = min(s.end, last)
        out["segments"].append({
            "index": s.index, "start_s": _s(s.start - first), "end_s": _s(end - first),
            "start_ns": s.start, "end_ns": end,
            "start_wall": wallclock(meta, s.start), "end_wall": wallclock(meta, end),
            "measured_s": [_s(s.t0 - first), _s(min(s.t1, last) - first)],
            "tunables": model.tuning.in_force(s.start),
            "opened_by": [_change(c, first, meta) for c in s.opened_by],
            "metrics": _nest(st)})
    for k in range(1, len(segs)):
        out["changes"].append({
            "index": k, "before": k - 1, "after": k, "at_s": _s(segs[k].start - first),
            "wall": wallclock(meta, segs[k].start),
            "tunables": [_change(c, first, meta) for c in segs[k].opened_by],
            "metrics": _nest(compare(stats[k - 1], stats[k]))})
    return out


def _s(ns: int) -> float:
    return round(ns / 1e9, 3)


def _change(c, first: int, meta: dict) -> dict:
    return {**c.as_dict(), "at_s": _s(c.ts - first), "wall": wallclock(meta, c.ts)}


def _nest(flat: dict) -> dict:
    """{(pool, metric): x} -> {pool: {metric: x}} in display order."""
    out: dict = {}
    for pool, metric in sorted(flat, key=order):
        out.setdefault(pool, {})[metric] = flat[(pool, metric)]
    return out


def render(capture: Capture, fmt: str) -> str:
    data = as_dict(capture)
    if fmt == "json":
        return json.dumps(data, indent=1) + "\n"
    if fmt == "csv":
        return _csv(data)
    return _text(data)


def _opened(seg: dict) -> str:
    return ";".join(f"{c['name']} {c['old']}->{c['new']}" for c in seg["opened_by"])


def _csv(data: dict) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for seg in data["segments"]:
        diff = data["changes"][seg["index"] - 1]["metrics"] if seg["index"] else {}
        for pool, ms in seg["metrics"].items():
            for metric, st in ms.items():
                d = diff.get(pool, {}).get(metric, {})
                row = {"segment": seg["index"], "start_s": seg["start_s"], "end_s": seg["end_s"],
                       "opened_by": _opened(seg), "pool": pool, "metric": metric, **st,
                       "ratio_mean": d.get("ratio_mean"), "ratio_p99": d.get("ratio_p99")}
                writer.writerow({k: safe.cell(v) for k, v in row.items()})
    return out.getvalue()


def _text(data: dict) -> str:
    meta = data["meta"]
    target = meta["target"]
    lines = [f"zfsobs report --compare: {meta.get('host') or '?'}  {target.get('kind', '?')} OpenZFS "
             f"{target.get('zfs_version', '?')}",
             f"duration {meta['duration_s']:.1f} s   events {meta['events']}   "
             f"tunable changes {sum(len(c['tunables']) for c in data['changes'])}"]
    lines += [f"warning: {w}" for w in meta["warnings"]]
    initial = " ".join(f"{k}={v}" for k, v in sorted(meta["tunables_initial"].items()))
    lines += textwrap.wrap("tunables at start: " + (initial or "(none recorded)"), 110,
                           subsequent_indent="  ", break_on_hyphens=False)
    lines.append("")
    for seg in data["segments"]:
        lines.append(f"segment {seg['index']}  {seg['start_s']:8.1f} - {seg['end_s']:.1f} s   "
                     f"{seg['start_wall']} - {seg['end_wall']}   "
                     + " ".join(f"{c['name']}={c['new']}" for c in seg["opened_by"]))
    if not data["changes"]:
        lines += ["", "no tunable changes in this capture", ""]
        lines += _segment_table(data["segments"][0]) if data["segments"] else ["(no events)"]
    for ch in data["changes"]:
        before, after = data["segments"][ch["before"]], data["segments"][ch["after"]]
        lines.append("")
        for c in ch["tunables"]:
            lines.append(f"change {ch['index']} at {ch['at_s']:.1f} s ({ch['wall']}): {c['name']} "
                         f"{c['old']} -> {c['new']}  (pid {c['pid']}, {c['src'] or '?'}; seen by a poll, "
                         "made up to 0.5 s earlier)")
        lines.append(f"  segment {before['index']} ({before['start_s']:.1f}-{before['end_s']:.1f} s) -> "
                     f"segment {after['index']} ({after['start_s']:.1f}-{after['end_s']:.1f} s)")
        lines += _diff_table(ch["metrics"])
    # the names, host and warnings in them come from the capture
    return "\n".join(map(safe.text, lines)) + "\n"


def _segment_table(seg: dict) -> list[str]:
    lines = []
    for pool, ms in seg["metrics"].items():
        lines.append(f"pool {pool}")
        lines.append(f"  {'metric':<30} {'n':>6} {'mean':>13} {'p99':>13} {'max':>13}")
        for metric, st in ms.items():
            lines.append(f"  {metrics.label(metric):<30} {st['n']:>6} "
                         + " ".join(f"{metrics.value(metric, st[k]):>13}" for k in ("mean", "p99", "max")))
    return lines or ["(no samples)"]


def _diff_table(diff: dict) -> list[str]:
    lines = []
    for pool, ms in diff.items():
        lines.append(f"  pool {pool}")
        lines.append(f"    {'metric':<30} {'n':>5} {'before mean':>13} {'before p99':>13} {'n':>5} "
                     f"{'after mean':>13} {'after p99':>13} {'ratio mean':>10} {'ratio p99':>10}")
        for metric, d in ms.items():
            b, a = d["before"], d["after"]
            lines.append(f"    {metrics.label(metric):<30} {b['n']:>5} {metrics.value(metric, b['mean']):>13} "
                         f"{metrics.value(metric, b['p99']):>13} {a['n']:>5} "
                         f"{metrics.value(metric, a['mean']):>13} {metrics.value(metric, a['p99']):>13} "
                         f"{metrics.ratio(d['ratio_mean']):>10} {metrics.ratio(d['ratio_p99']):>10}")
    return lines or ["  (no samples on either side)"]
