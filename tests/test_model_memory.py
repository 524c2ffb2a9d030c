"""Flat memory over a long run, accelerated: a real lab capture (tests/data, recorded by
scripts/record-fixtures) fed to the live model again and again, each repetition as a new set of
ztest processes (new pids, as every ztest pass is) later in time. Once the live history is full, the
model must stop growing: its length (10 minutes) is cut to one here, as the replay tests cut it,
so that ten repetitions past it take seconds. Before the fix it grew by ~4 MiB a minute: vdev
queue series of exited processes were never forgotten. The real-time run is scripts/soak (docs/reliability.md)."""
from __future__ import annotations

import gc

from conftest import recorded_capture
from zfsobs.capture import read_capture
from zfsobs.events import Event, Parser, parse_all
from zfsobs.model import Model

KEEP_NS = 60 * 10**9
KEEP_ROWS = 1000         # txg and ZIL rows per pool (the live view's 5000, cut as the history is)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def later(ev: Event, rep: int, span: int) -> Event:
    """The event as the rep-th repetition: shifted in time, from processes of its own."""
    fields = dict(ev.fields)
    if isinstance(fields.get("pid"), int):
        fields["pid"] += rep * 1_000_000
    for name in ("start", "since"):
        if isinstance(fields.get(name), int):
            fields[name] += rep * span
    return Event(ev.kind, ev.ts + rep * span, fields)


def sizes(model: Model) -> tuple:
    return (len(model.vq.series), len(model.vq.vdevs), len(model.vc.vdevs),
            sum(len(p.rows) for p in model.txg.pools.values()), sum(len(p.order) for p in model.zil.pools.values()))


def test_the_live_model_stops_growing_once_its_history_is_full(monkeypatch):
    from zfsobs.model import samples as sample_model, vdev_cache, vdev_queue, zil
    for module, name in ((sample_model, "KEEP_NS"), (vdev_queue, "KEEP_NS"), (vdev_cache, "KEEP_NS"),
                         (zil, "FLOW_KEEP_NS")):
        monkeypatch.setattr(module, name, KEEP_NS)
    monkeypatch.setattr("zfsobs.model.KEEP_NS", KEEP_NS)
    events = list(parse_all(read_capture(recorded_capture()).lines, Parser()))
    span = events[-1].ts - events[0].ts + 10**9
    full = (2 * KEEP_NS) // span + 1          # the history window filled, and a margin
    reps = full + 10
    model = Model(keep=KEEP_ROWS)
    samples = []
    for rep in range(reps):
        for ev in events:
            model.feed(later(ev, rep, span))
        gc.collect()
        samples.append((rss_bytes(), sizes(model)))
    assert reps - full >= 10
    rss_full, sizes_full = samples[full]
    rss_end, sizes_end = samples[-1]
    # the counts of everything kept are the same from then on; memory grows by under 2 MiB
    assert sizes_end == sizes_full, (sizes_full, sizes_end)
    assert rss_end - rss_full < 2 << 20, [s[0] >> 20 for s in samples]
