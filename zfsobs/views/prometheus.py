"""The model as Prometheus metric families (docs/prometheus.md), for the exporter's /metrics and the
OpenMetrics export of a capture. prometheus_client writes the exposition formats; this only says
what each family holds. Names follow Prometheus's rules: one prefix, base units, `_total` on
counters, classic histograms (Prometheus 2.42's backfill has no native ones), pool label `zpool`
as node_exporter has it. No rates or means: PromQL makes them from the counters."""
from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from zfsobs import safe
from zfsobs.model import Model
from zfsobs.model.counters import DELAY_BUCKETS
from zfsobs.model.vdev_queue import CLASSES
from zfsobs.model.zil import LAT_BUCKETS, lat_bounds

# the ZIL probe's latency buckets come two per power of two; every second edge (a power of two)
# makes a Prometheus bucket, from 8 us to 17 s
ZIL_EDGES = [i for i in range(2, LAT_BUCKETS - 1, 2) if 2**13 <= lat_bounds(i)[0] <= 2**34]


def _zil_buckets(hist: list[int]) -> list[tuple[str, int]]:
    """The probe's histogram as cumulative (le, count) at power-of-two edges (exact: no probe
    bucket straddles an edge)."""
    out, seen, edge = [], 0, iter(ZIL_EDGES)
    nxt = next(edge)
    for i, n in enumerate(hist):
        while nxt is not None and i >= nxt:
            out.append((repr(lat_bounds(nxt)[0] / 1e9), seen))
            nxt = next(edge, None)
        seen += n
    while nxt is not None:
        out.append((repr(lat_bounds(nxt)[0] / 1e9), seen))
        nxt = next(edge, None)
    return out + [("+Inf", seen)]


def families(model: Model, info: dict, cost: dict | None = None, ts: float | None = None) -> list:
    """Every family as of now (live, ts None) or stamped ts (seconds since the epoch: an export).
    A family whose figures the source cannot give (kstat mode's `na`) is left out, never sent as 0."""
    out = [_info(info, ts)]
    out += _txg(model, ts) + _throttle(model, ts) + _zil(model, ts) + _vq(model, ts) + _vc(model, ts)
    tun = GaugeMetricFamily("zfsobs_tunable_value", "A ZFS tunable as zfsobs last read it (a change "
                            "is a step: changes() finds them)", labels=["name"])
    for name, value in sorted(model.tuning.values.items()):
        tun.add_metric([name], value, timestamp=ts)
    lost = CounterMetricFamily("zfsobs_lost_events", "Probe output the kernel or a late dump dropped "
                               "(docs/reliability.md)", labels=["probe"])
    for probe in sorted(set(model.probes) | set(model.lost_by_probe)):     # 0 is a figure too
        lost.add_metric([probe], model.lost_by_probe[probe], timestamp=ts)
    events = CounterMetricFamily("zfsobs_events", "Events zfsobs has read")
    events.add_metric([], model.events, timestamp=ts)
    out += [tun, lost, events]
    if cost:
        cpu = CounterMetricFamily("zfsobs_self_cpu_seconds", "CPU time of zfsobs and its tracers",
                                  labels=["process"], unit="seconds")
        for process, seconds in sorted(cost.items()):
            cpu.add_metric([process], seconds, timestamp=ts)
        out.append(cpu)
    for fam in out:      # pool, vdev and tunable names from the traced system: shown, not sent, to a reader
        fam.samples = [s if all(map(str.isprintable, s.labels.values())) else
                       s._replace(labels={k: safe.text(v) for k, v in s.labels.items()}) for s in fam.samples]
    return out


def _info(info: dict, ts) -> GaugeMetricFamily:
    names = sorted(info)
    # an info metric as a gauge: Prometheus 2.42's backfill reads no `info` type
    g = GaugeMetricFamily("zfsobs_build_info", "zfsobs, its source and what it traces", labels=names)
    g.add_metric([str(info[n]) for n in names], 1, timestamp=ts)
    return g


def _txg(model: Model, ts) -> list:
    h = HistogramMetricFamily("zfsobs_txg_sync_duration_seconds", "spa_sync() time per txg (the txgs "
                              "kstat's stime, without its history bookkeeping)", labels=["zpool"],
                              unit="seconds")
    for pool, hist in sorted(model.counters.sync.items()):
        h.add_metric([pool], [(repr(le) if le != float("inf") else "+Inf", n) for le, n in hist.cumulative()],
                     hist.total, timestamp=ts)
    return [h]


def _throttle(model: Model, ts) -> list:
    """The write throttle (docs/txg.md), where it is traced."""
    if not model.counters.throttle:
        return []
    delayed = CounterMetricFamily("zfsobs_write_throttle_delayed_transactions", "Transactions the write "
                                  "throttle held back (the dmu_tx kstat's dmu_tx_dirty_delay + dmu_tx_wrlog_delay)",
                                  labels=["zpool"])
    delay = HistogramMetricFamily("zfsobs_write_throttle_delay_seconds", "Time throttled transactions waited "
                                  "in dmu_tx_wait()", labels=["zpool"], unit="seconds")
    waits = CounterMetricFamily("zfsobs_write_throttle_txg_waits", "Other dmu_tx_wait() calls: a "
                                "transaction waiting for a txg", labels=["zpool"])
    wait_s = CounterMetricFamily("zfsobs_write_throttle_txg_wait_seconds", "Time of those waits", labels=["zpool"],
                                 unit="seconds")
    ratio = GaugeMetricFamily("zfsobs_write_throttle_dirty_ratio", "The latest txg's highest dirty data "
                              "over zfs_dirty_data_max (the delay starts at zfs_delay_min_dirty_percent)",
                              labels=["zpool"])
    for pool, c in sorted(model.counters.throttle.items()):
        delayed.add_metric([pool], c["delays"], timestamp=ts)
        seen, buckets = 0, []
        for i, le in enumerate(DELAY_BUCKETS + (float("inf"),)):
            seen += c[f"d{i}"]
            buckets.append((repr(le) if le != float("inf") else "+Inf", seen))
        delay.add_metric([pool], buckets, c["delay_ns"] / 1e9, timestamp=ts)
        waits.add_metric([pool], c["waits"], timestamp=ts)
        wait_s.add_metric([pool], c["wait_ns"] / 1e9, timestamp=ts)
        if pool in model.counters.dirty_ratio:
            ratio.add_metric([pool], model.counters.dirty_ratio[pool], timestamp=ts)
    return [delayed, delay, waits, wait_s, ratio]


def _zil(model: Model, ts) -> list:
    commits = CounterMetricFamily("zfsobs_zil_commits", "zil_commit() calls that committed (fsync, "
                                  "O_SYNC, sync=always)", labels=["zpool"])
    lat = HistogramMetricFamily("zfsobs_zil_commit_duration_seconds", "zil_commit() latency",
                                labels=["zpool"], unit="seconds")
    lwbs = CounterMetricFamily("zfsobs_zil_log_blocks", "Log write blocks issued", labels=["zpool"])
    used = CounterMetricFamily("zfsobs_zil_log_bytes", "Bytes of log records in the log blocks "
                               "(zilstat's N-Bytes)", labels=["zpool"], unit="bytes")
    for pool, state in sorted(model.zil.pools.items()):
        t = state.totals
        commits.add_metric([pool], t["commits"], timestamp=ts)
        lat.add_metric([pool], _zil_buckets(state.lat_totals), t["lat_ns"] / 1e9, timestamp=ts)
        lwbs.add_metric([pool], t["lwbs"], timestamp=ts)
        used.add_metric([pool], t["nused"], timestamp=ts)
    return [commits, lwbs, used] + ([] if "lat_ns" in model.na.get("zil", ()) else [lat])


def _vq(model: Model, ts) -> list:
    labels = ["zpool", "vdev", "priority"]
    fam = {
        "pend": GaugeMetricFamily("zfsobs_vdev_queue_pending", "I/Os queued in ZFS, not yet issued", labels=labels),
        "act": GaugeMetricFamily("zfsobs_vdev_queue_active", "I/Os issued to the device, not yet done", labels=labels),
        "pend_ns": CounterMetricFamily("zfsobs_vdev_queue_pending_seconds", "Time integral of the pending "
                                       "depth: rate() is the time-weighted mean", labels=labels, unit="seconds"),
        "act_ns": CounterMetricFamily("zfsobs_vdev_queue_active_seconds", "Time integral of the active "
                                      "depth: rate() is the time-weighted mean", labels=labels, unit="seconds"),
        "enq": CounterMetricFamily("zfsobs_vdev_queue_enqueued", "I/Os that entered the queue", labels=labels),
        "done": CounterMetricFamily("zfsobs_vdev_queue_completed", "Device I/Os completed (aggregates "
                                    "included)", labels=labels),
        "wait_ns": CounterMetricFamily("zfsobs_vdev_queue_wait_seconds", "Summed time queued I/Os waited "
                                       "before issue", labels=labels, unit="seconds"),
        "dev_ns": CounterMetricFamily("zfsobs_vdev_queue_device_seconds", "Summed device time of the "
                                      "completed I/Os", labels=labels, unit="seconds"),
    }
    totals, depth = model.counters.by_path()
    for (pool, path, cls), c in sorted(totals.items()):
        if not 0 <= cls < len(CLASSES):        # counted in zfsobs_vdev_queue_unknown_class_events
            continue
        lab = [pool, path, CLASSES[cls]]
        d = depth.get((pool, path, cls), (0, 0))
        fam["pend"].add_metric(lab, d[0], timestamp=ts)
        fam["act"].add_metric(lab, d[1], timestamp=ts)
        for key in ("pend_ns", "act_ns", "wait_ns", "dev_ns"):
            fam[key].add_metric(lab, c[key] / 1e9, timestamp=ts)
        for key in ("enq", "done"):
            fam[key].add_metric(lab, c[key], timestamp=ts)
    limit = GaugeMetricFamily("zfsobs_vdev_queue_max_active", "The class's zfs_vdev_*_max_active",
                              labels=["zpool", "priority"])
    floor = GaugeMetricFamily("zfsobs_vdev_queue_min_active", "The class's zfs_vdev_*_min_active",
                              labels=["zpool", "priority"])
    for (pool, cls), (hi, lo) in sorted(model.counters.limits.items()):
        if not 0 <= cls < len(CLASSES):
            continue
        limit.add_metric([pool, CLASSES[cls]], hi, timestamp=ts)
        floor.add_metric([pool, CLASSES[cls]], lo, timestamp=ts)
    unknown = CounterMetricFamily("zfsobs_vdev_queue_unknown_class_events", "vdev queue lines of an I/O "
                                  "class this zfsobs has no name for (a newer ZFS's): left out of the families")
    unknown.add_metric([], model.vq.unknown_class, timestamp=ts)
    na = model.na.get("vdev_queue", ())      # kstat mode: depths only (docs/kstat.md)
    return [f for key, f in fam.items() if key not in na] + [limit, floor, unknown]


def _vc(model: Model, ts) -> list:
    labels = ["zpool", "vdev"]
    fam = {
        "reads": CounterMetricFamily("zfsobs_vdev_cache_reads", "Reads offered to the vdev cache", labels=labels),
        "hits": CounterMetricFamily("zfsobs_vdev_cache_hits", "Reads the vdev cache served", labels=labels),
        "misses": CounterMetricFamily("zfsobs_vdev_cache_misses", "Reads that filled a cache line from "
                                      "the device", labels=labels),
        "read_bytes": CounterMetricFamily("zfsobs_vdev_cache_read_bytes", "Bytes asked of the cache",
                                          labels=labels, unit="bytes"),
        "fill_bytes": CounterMetricFamily("zfsobs_vdev_cache_device_bytes", "Bytes the device read to "
                                          "fill cache lines (inflation: over read_bytes)", labels=labels,
                                          unit="bytes"),
    }
    for (pool, path), c in sorted(model.counters.vc.items()):
        for key, f in fam.items():
            f.add_metric([pool, path], c[key], timestamp=ts)
    na = model.na.get("vdev_cache", ())
    return [f for key, f in fam.items() if key not in na] if model.counters.vc else []
