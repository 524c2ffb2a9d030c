"""The tunable watcher and `lab set`'s pieces that need no running lab: the sysfs reader on a
directory laid out like /sys/module/zfs/parameters, change detection, the ztest options layout,
and the checks on NAME=VALUE against the installed libzpool's exported globals."""
from __future__ import annotations

import struct

import pytest

from zfsobs.errors import ZfsobsError
from zfsobs.events import Parser
from zfsobs.labs.knob import GVARS_COUNT, GVARS_LEN, GVARS_TAIL, OptionsFile, parse_assignment
from zfsobs.targets.target import libzpool
from zfsobs.targets.tunables import BY_NAME, TABLE, platform_name
from zfsobs.sources.watcher import POLL_NS, SysfsReader, Watcher


class Clock:
    def __init__(self):
        self.now = 10**12

    def __call__(self):
        return self.now


def params(tmp_path, **values):
    for name, value in values.items():
        (tmp_path / name).write_text(f"{value}\n")
    return SysfsReader(str(tmp_path))


def test_sysfs_watcher_sends_every_value_once_then_only_changes(tmp_path):
    clock = Clock()
    w = Watcher(params(tmp_path, zfs_txg_timeout=5, zfs_vdev_async_write_max_active=10, not_a_tunable=1), clock)
    assert sorted(w.names) == ["zfs_txg_timeout", "zfs_vdev_async_write_max_active"]
    first = [Parser().parse(line) for line in w.poll()]
    assert {(e.get("name"), e.get("new"), e.get("initial"), e.get("old")) for e in first} == \
        {("zfs_txg_timeout", 5, 1, None), ("zfs_vdev_async_write_max_active", 10, 1, None)}
    assert all(e.kind == "tunable" and e.ts == clock.now and e.get("src") == "sysfs" for e in first)
    (tmp_path / "zfs_vdev_async_write_max_active").write_text("2\n")
    assert w.poll() == []                       # not a poll interval yet
    before = clock.now
    clock.now += POLL_NS
    (change,) = [Parser().parse(line) for line in w.poll()]
    assert (change.get("name"), change.get("old"), change.get("new")) == ("zfs_vdev_async_write_max_active", 10, 2)
    assert change.get("since") == before and change.ts == clock.now and change.get("initial") is None
    clock.now += POLL_NS
    assert w.poll() == []


def test_every_table_entry_names_a_metric_and_has_platform_names():
    assert len(BY_NAME) == len(TABLE)
    for t in TABLE:
        assert t.metric in ("txg", "zil", "vdev_queue", "vdev_cache") and t.what
        assert platform_name(t, "linux") == t.name
        assert platform_name(t, "freebsd").startswith("vfs.zfs.")
    assert platform_name(BY_NAME["zil_maxblocksize"], "illumos") == ""


def test_the_installed_libzpool_exports_the_lab_tunables():
    """2.1.11's libzpool: every tunable of the table that 2.1 has is a 4- or 8-byte global there."""
    target = libzpool()
    if target.version != "2.1.11":
        pytest.skip("the sizes below are 2.1.11's")
    sizes = {n: target.symbol_sizes.get(n) for n in ("zfs_txg_timeout", "zfs_dirty_data_max",
                                                     "zfs_vdev_async_write_max_active", "zfs_vdev_cache_max")}
    assert sizes == {"zfs_txg_timeout": 4, "zfs_dirty_data_max": 8, "zfs_vdev_async_write_max_active": 4,
                     "zfs_vdev_cache_max": 4}


def test_lab_set_checks_name_and_value():
    target = libzpool()
    assert parse_assignment("zfs_vdev_async_write_max_active=0x10", target) == ("zfs_vdev_async_write_max_active", 16)
    for text, why in (("zfs_vdev_async_write_max_active", "expected NAME=VALUE"),
                      ("zfs_vdev_async_write_max_active=ten", "must be an integer"),
                      ("zfs_vdev_async_write_max_active=4294967296", "32-bit"),
                      ("zfs_vdev_async_write_max_activ=3", "did you mean zfs_vdev_async_write_max_active")):
        with pytest.raises(ZfsobsError, match=why):
            parse_assignment(text, target)


def options_file(tmp_path, zfs, entries):
    """A file laid out like ztest's shared data (header, then ztest_shared_opts_t ending in
    int zo_gvars_count + char zo_gvars[10][64] and the version's padding), as `lab set` sees it."""
    hdr, opts = 56, 1792 if zfs == "2.1" else 1808
    data = bytearray(hdr + opts + 4096)
    data[0:16] = struct.pack("<QQ", hdr, opts)
    gvars = hdr + opts - GVARS_TAIL[zfs]
    data[gvars - 4:gvars] = struct.pack("<i", len(entries))
    for i, e in enumerate(entries):
        data[gvars + i * GVARS_LEN:gvars + i * GVARS_LEN + len(e)] = e.encode()
    path = tmp_path / f"ztest.data.{zfs}"
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("zfs", sorted(GVARS_TAIL))
def test_options_file_replaces_or_appends_a_gvar(tmp_path, zfs):
    path = options_file(tmp_path, zfs, ["zfs_vdev_async_write_max_active=3"])
    opts = OptionsFile(str(path), zfs)
    opts.set("zfs_vdev_async_write_max_active", 1)
    opts.set("zfs_txg_timeout", 7)
    assert opts.entries() == ["zfs_vdev_async_write_max_active=1", "zfs_txg_timeout=7"]
    for i in range(GVARS_COUNT - 2):
        opts.set(f"zfs_x{i}", i)
    with pytest.raises(ZfsobsError, match="at most 10"):
        opts.set("zfs_one_more", 1)
    opts.close()


def test_a_scan_reads_no_process_maps_twice(monkeypatch):
    """The lab's watcher scans /proc every 2 s for the newest process of the library: what a scan
    found per process (by its start time: a pid can come back as another process) is kept, so a
    process's maps (ztest's run to hundreds of lines) are read once, not at every scan. On a real process."""
    import subprocess
    import time

    from zfsobs.labs import procmem
    from zfsobs.sources import watcher

    child = subprocess.Popen(["sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while not (libc := [m for _, off, m in procmem._maps(child.pid) if "/libc." in m and off == 0]):
            assert time.monotonic() < deadline, "sleep never mapped libc"
            time.sleep(0.01)      # its exec is still under way
        libc = libc[0]
        only = lambda pid: pid == child.pid      # noqa: E731 - as the lab keeps to its ztest passes
        known: dict = {}
        assert watcher.library_pids(libc, only, known) == [child.pid] and child.pid in known
        reads = []
        real = watcher.load_base
        monkeypatch.setattr(watcher, "load_base", lambda pid, path: reads.append(pid) or real(pid, path))
        assert watcher.library_pids(libc, only, known) == [child.pid] and reads == []
        # the same pid with another start time is another process: read again
        known[child.pid] = (known[child.pid][0] - 1, False)
        assert watcher.library_pids(libc, only, known) == [child.pid] and reads == [child.pid]
        assert watcher.library_pids("/nonexistent/libzpool.so", only, {}) == []
    finally:
        child.kill()
        child.wait()
    assert watcher.library_pids(libc, only, known) == [] and known == {}


def test_a_process_gone_before_it_opens_leaves_none_open(monkeypatch):
    """The lab's ztest passes come and go: the open one ends, the scan finds a newer one, and that
    one is gone before its memory opens. The reader then holds no process, not the closed file of
    the old one (read at the next poll: "ValueError: I/O operation on closed file", an internal
    error that ended a side-by-side recorder at its SIGINT, 2026-11-29)."""
    from zfsobs.labs.procmem import Gone
    from zfsobs.sources import watcher

    class Globals:
        """A process's memory as a file: reading it once closed raises as a closed file does."""
        def __init__(self, pid, target):
            if pid in gone:
                raise Gone(pid)
            self.pid, self.closed = pid, False

        def read(self, name):
            if self.closed:
                raise ValueError("I/O operation on closed file")
            if self.pid in gone:
                raise Gone(self.pid)
            return 7

        def close(self):
            self.closed = True

    gone, pids, clock = set(), [1], [100.0]
    monkeypatch.setattr(watcher, "ProcessGlobals", Globals)
    monkeypatch.setattr(watcher, "library_pids", lambda path, only, known: known.update(
        (p, (0.0, True)) for p in pids) or list(pids))
    monkeypatch.setattr(watcher, "_uptime", lambda: 50.0)
    monkeypatch.setattr(watcher.time, "monotonic", lambda: clock[0])
    reader = watcher.ProcessReader(libzpool(), lambda pid: True)
    reader.names = ["zfs_txg_timeout"]
    assert reader.read() == (1, {"zfs_txg_timeout": 7})
    gone.add(1)
    pids.append(2)
    gone.add(2)                 # found by the scan, gone before its memory opens
    assert reader.read() is None and reader.open is None
    clock[0] += 0.5             # the next poll, before the next scan
    assert reader.read() is None
    gone.discard(2)
    clock[0] += watcher.RESCAN_S
    assert reader.read() == (2, {"zfs_txg_timeout": 7})
