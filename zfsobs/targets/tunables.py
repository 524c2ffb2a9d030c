"""The ZFS tunables that move the four metrics, by platform: what the watcher reads and `lab set`
may write. Names are OpenZFS's C globals, which are also Linux's module parameters
(/sys/module/zfs/parameters/NAME) and illumos's mdb symbols; FreeBSD spells them as sysctls.

A tunable a build does not have (2.2 removed the vdev cache; 2.3's libzpool no longer exports the
per-class limits other than async write) is simply not watched there: `available()` decides.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tunable:
    name: str           # OpenZFS C global = Linux module parameter
    metric: str         # txg | zil | vdev_queue | vdev_cache
    what: str
    freebsd: str = ""   # sysctl, where OpenZFS's ZFS_MODULE_PARAM gives it one
    illumos: str = ""   # when illumos-gate's global differs ("-": illumos has none)


def _vq_class(cls: str, what: str) -> list[Tunable]:
    return [Tunable(f"zfs_vdev_{cls}_{m}_active", "vdev_queue", f"{what}: {m} I/Os active per leaf vdev",
                    f"vfs.zfs.vdev.{cls}_{m}_active") for m in ("min", "max")]


TABLE: tuple[Tunable, ...] = (
    Tunable("zfs_txg_timeout", "txg", "seconds before an open txg is forced to sync", "vfs.zfs.txg.timeout"),
    Tunable("zfs_dirty_data_max", "txg", "bytes of dirty data before writes are throttled",
            "vfs.zfs.dirty_data_max"),
    Tunable("zfs_dirty_data_max_percent", "txg", "zfs_dirty_data_max as % of memory (at load)",
            "vfs.zfs.dirty_data_max_percent"),
    Tunable("zfs_dirty_data_sync_percent", "txg", "dirty data (% of max) that starts a txg sync early",
            "vfs.zfs.dirty_data_sync_percent", "-"),
    Tunable("zfs_delay_min_dirty_percent", "txg", "dirty data (% of max) where the write delay starts",
            "vfs.zfs.delay_min_dirty_percent"),
    Tunable("zfs_delay_scale", "txg", "write delay curve scale (ns)", "vfs.zfs.delay_scale"),
    Tunable("zfs_vdev_max_active", "vdev_queue", "I/Os active per leaf vdev, all classes together",
            "vfs.zfs.vdev.max_active"),
    *_vq_class("sync_read", "sync reads"),
    *_vq_class("sync_write", "sync writes (ZIL)"),
    *_vq_class("async_read", "async reads (prefetch)"),
    *_vq_class("async_write", "async writes (txg sync)"),
    *_vq_class("scrub", "scrub/resilver reads"),
    Tunable("zfs_vdev_async_write_active_min_dirty_percent", "vdev_queue",
            "dirty data (% of max) below which async writes use min_active",
            "vfs.zfs.vdev.async_write_active_min_dirty_percent"),
    Tunable("zfs_vdev_async_write_active_max_dirty_percent", "vdev_queue",
            "dirty data (% of max) above which async writes use max_active",
            "vfs.zfs.vdev.async_write_active_max_dirty_percent"),
    Tunable("zfs_vdev_aggregation_limit", "vdev_queue", "largest aggregated I/O (bytes)",
            "vfs.zfs.vdev.aggregation_limit"),
    Tunable("zfs_vdev_max_pending", "vdev_queue", "I/Os outstanding per leaf vdev (before the 2013 "
            "I/O scheduler)", "vfs.zfs.vdev.max_pending"),
    Tunable("zfs_vdev_cache_size", "vdev_cache", "vdev cache bytes per leaf vdev (0: off)", "vfs.zfs.vdev.cache.size"),
    Tunable("zfs_vdev_cache_max", "vdev_cache", "reads smaller than this are inflated", "vfs.zfs.vdev.cache.max"),
    Tunable("zfs_vdev_cache_bshift", "vdev_cache", "log2 of the inflated read size", "vfs.zfs.vdev.cache.bshift"),
    Tunable("zil_slog_bulk", "zil", "log bytes per commit above which a slog write goes async priority",
            "vfs.zfs.zil.slog_bulk"),
    Tunable("zil_maxblocksize", "zil", "largest log block (bytes)", "vfs.zfs.zil.maxblocksize", "-"),
    Tunable("zfs_commit_timeout_pct", "zil", "how long a commit waits to fill a log block (% of the "
            "last log write latency)", "vfs.zfs.commit_timeout_pct"),
    Tunable("zil_nocacheflush", "zil", "1: no cache flush after log writes (unsafe)", "vfs.zfs.zil.nocacheflush"),
    Tunable("zfs_immediate_write_sz", "zil", "writes larger than this log a block pointer, not data",
            "vfs.zfs.immediate_write_sz"),
)
BY_NAME = {t.name: t for t in TABLE}


def platform_name(t: Tunable, platform: str) -> str:
    """The tunable's name on `platform` (linux, illumos, freebsd); '' if it has none there."""
    if platform == "freebsd":
        return t.freebsd
    if platform == "illumos":
        return "" if t.illumos == "-" else t.illumos or t.name
    return t.name
