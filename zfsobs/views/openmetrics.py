"""A capture as OpenMetrics text with timestamps, for `promtool tsdb create-blocks-from openmetrics`
(docs/prometheus.md, "Backfill"): the exporter's families (views/prometheus.py) as a scrape every
`step` seconds of the capture would have seen them. promtool wants every sample timestamped, each
family in one piece, each series in time order and `# EOF` at the end, and adds no job or instance
label itself: the file carries them."""
from __future__ import annotations

from typing import IO

from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Sample

from zfsobs import __version__, safe
from zfsobs.capture import Capture
from zfsobs.errors import ZfsobsError
from zfsobs.events import Parser
from zfsobs.model import Model
from zfsobs.views.prometheus import families

SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")
# Bounds of one export, all held until it is written (promtool wants each family in one piece): a
# month of 15 s steps is 172,800 points
MAX_POINTS = 250_000
MAX_SAMPLES = 20_000_000


def _series(sample: Sample) -> tuple:
    """A sample's series: its family's point at one time holds the buckets, count and sum."""
    return tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))


def export(capture: Capture, out: IO[bytes], step_s: float = 15.0, instance: str | None = None) -> int:
    """Write the capture's metrics every step_s seconds of its time (and at its last event); the
    number of points written per series."""
    meta = capture.meta
    to_wall = (meta.get("start_wall_ns", 0) - meta.get("start_mono_ns", 0))
    info = {"version": __version__, "source": meta.get("source", "trace"),
            "target": (meta.get("target") or {}).get("kind", "?") if isinstance(meta.get("target"), dict)
            else str(meta.get("target", "?"))}
    labels = {"job": "zfsobs", "instance": safe.text(instance or str(meta.get("host") or "capture"))}
    model = Model(keep=None, samples=False)
    merged: dict[str, object] = {}
    points = 0

    samples = 0

    def snapshot(mono: int) -> None:
        nonlocal points, samples
        points += 1
        for fam in families(model, info, ts=round((mono + to_wall) / 1e9, 3)):
            samples += len(fam.samples)
            into = merged.setdefault(fam.name, fam)
            if into is not fam:
                into.samples.extend(fam.samples)
        if samples > MAX_SAMPLES:
            raise ZfsobsError(f"openmetrics: more than {MAX_SAMPLES} samples (series x points) by "
                              f"{(mono - first) / 1e9:.0f} s into the capture; choose a larger --step")

    step = max(1, int(step_s * 1e9))
    nxt = first = None
    for ev in capture.events(Parser(), digests=False):     # streamed: the capture's lines never all held
        if nxt is None:
            nxt, first = ev.ts + step, ev.ts
        if ev.ts >= nxt and points + (ev.ts - nxt) // step + 1 > MAX_POINTS:
            raise ZfsobsError(f"openmetrics: --step {step_s:g} makes more than {MAX_POINTS} points per series "
                              f"(the capture spans at least {(ev.ts - first) / 1e9:.0f} s); choose a larger --step")
        while ev.ts >= nxt:
            snapshot(nxt)
            nxt += step
        model.feed(ev)
    if model.last_ts is not None and (nxt is None or model.last_ts > nxt - step):
        snapshot(model.last_ts)
    for fam in merged.values():
        order = {id(s): i for i, s in enumerate(fam.samples)}
        fam.samples = [Sample(s.name, {**s.labels, **labels}, s.value, s.timestamp, s.exemplar)
                       for s in sorted(fam.samples, key=lambda s: (_series(s), s.timestamp, order[id(s)]))]

    class Snapshots:
        def collect(self):
            return list(merged.values())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Snapshots())
    out.write(generate_latest(registry))
    return points
