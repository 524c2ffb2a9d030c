"""zfsobs: live ZFS internals (txg sync, ZIL, vdev queue, vdev_cache) from bpftrace / DTrace probes."""
__version__ = "0.1.0"
