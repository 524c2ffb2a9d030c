"""How a bpftrace child runs: its environment (map size, string settings), its setup in the child,
and the chatter on its stderr that is not an error."""
from __future__ import annotations

import os
import resource
import signal

from zfsobs.procs import die_with_parent

# bpftrace chatter on stderr that is not an error on these machines ("Attached N probes": 0.24+).
NOISE = ("couldn't set RLIMIT_MEMLOCK", "Error while reading traceable functions",
         "WARNING: ", "Attaching ", "Attached ")
# No ".." after a string cut at its length (0.18+): a long vdev path is printed as str(p, 64) and the
# rest (docs/bpftrace-versions.md). The default length stays (64 up to 0.22, 1024 from 0.23): 64 on
# 0.27 puts strings on the BPF stack, past its 512 bytes in txg.bt.
_ENV = dict(os.environ, BPFTRACE_STR_TRUNC_TRAILER="")
# The probes read fields by offset, never by BTF type. Yet bpftrace 0.17 looks up every cast's type
# name (uint64, int32) in vmlinux's BTF and in every module's split BTF, a full scan each that fails:
# with 50 modules loaded, vdev_queue.bt took 171 s to compile under the kernel lab's TCG (8.5 s with
# vmlinux's BTF alone). Module BTF stays available to zfsobs itself (offsets._module_btf).
if os.path.exists("/sys/kernel/btf/vmlinux"):
    _ENV.setdefault("BPFTRACE_BTF", "/sys/kernel/btf/vmlinux")


def bpftrace_env(map_keys: int) -> dict:
    """The environment of a probe whose maps hold `map_keys` keys each (its `Map keys:` header,
    zfsobs/targets/render.py), past which an update fails. The name changed: MAP_KEYS_MAX up to
    0.23, MAX_MAP_KEYS from 0.20 (the only one 0.24+ reads)."""
    return dict(_ENV, BPFTRACE_MAP_KEYS_MAX=str(map_keys), BPFTRACE_MAX_MAP_KEYS=str(map_keys))


def child_setup() -> None:
    """In the bpftrace child: die with zfsobs (even on SIGKILL), and allow BPF map memory.
    SIGKILL, not SIGTERM: bpftrace 0.17 can lose a SIGTERM as it loses a SIGINT (stop_marker.py),
    and it then outlived zfsobs with its probes attached (CI saw one past 60 s). Nobody is left to
    read its END lines; the kernel removes its probes as its file descriptors close."""
    die_with_parent(signal.SIGKILL)
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        pass
