"""Flat memory over a long run, accelerated: 30 minutes of a real lab capture (tests/data, recorded
by scripts/record-fixtures) fed to the live model, each repetition as a new set of ztest processes
(new pids, as every ztest pass is) later in time. Once the live history (10 minutes) is full, the
model must stop growing. Before the fix it grew by ~4 MiB a minute: vdev queue series of exited
processes were never forgotten. The real-time run is scripts/soak (docs/reliability.md)."""
from __future__ import annotations

import gc

from conftest import recorded_capture
from zfsobs.capture import read_capture
from zfsobs.events import Event, Parser, parse_all
from zfsobs.model import Model
from zfsobs.model.samples import KEEP_NS

SIMULATED_S = 1800


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


def test_the_live_model_stops_growing_once_its_history_is_full():
    events = list(parse_all(read_capture(recorded_capture()).lines, Parser()))
    span = events[-1].ts - events[0].ts + 10**9
    reps = SIMULATED_S * 10**9 // span + 1
    full = (2 * KEEP_NS) // span + 1          # the history window filled, and a margin
    model = Model()
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
