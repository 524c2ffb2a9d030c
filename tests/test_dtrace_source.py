"""The dtrace runner and doctor on illumos/FreeBSD, run here with a fake platform value only where
a real dtrace cannot exist (no probe output is faked: without dtrace they must stop with one line)."""
from __future__ import annotations

import gzip
import io
import platform
import re
from pathlib import Path

import pytest

from zfsobs.doctor import report as doctor, dtrace as doctor_dtrace
from zfsobs.sources.dtrace import DtraceSource, choose, command_line, make_source, present, required_probes, d_script
from zfsobs.errors import ZfsobsError
from zfsobs.sources.dtrace_libs import failing_library, trimmed
from zfsobs.targets.platforms import uses_dtrace
from zfsobs.sources.bpftrace import BpftraceSource
from zfsobs.targets.target import kernel


@pytest.mark.parametrize("system, dtrace", [("SunOS", True), ("illumos", True), ("FreeBSD", True),
                                            ("Linux", False), ("Darwin", False)])
def test_the_platform_picks_the_tracer(system, dtrace):
    assert uses_dtrace(system) is dtrace


def test_this_machine_uses_bpftrace():
    assert platform.system() == "Linux" and not uses_dtrace()


def test_dtrace_command_line():
    libzpool_like = type("T", (), {"kind": "libzpool"})()
    assert command_line("/usr/sbin/dtrace", "/tmp/x/txg.bt", "tank") == \
        ["/usr/sbin/dtrace", "-q", "-Z", "-s", "/tmp/x/txg.bt", "tank", "1"]
    src = DtraceSource.__new__(DtraceSource)
    src.bpftrace, src.pool, src.options = "/usr/sbin/dtrace", "", ()
    assert src.command("/tmp/x/zil.bt") == ["/usr/sbin/dtrace", "-q", "-Z", "-s", "/tmp/x/zil.bt", "", "1"]
    src.options = ("-xsyslibdir=/var/cache/zfsobs/dtrace-libs/x",)
    assert src.command("/tmp/x/zil.bt")[:2] == ["/usr/sbin/dtrace", "-xsyslibdir=/var/cache/zfsobs/dtrace-libs/x"]
    src.meta, src.target = {"bpftrace": "v0.17.0"}, libzpool_like
    assert BpftraceSource.command(src, "/tmp/x/zil.bt") == ["/usr/sbin/dtrace", "--no-warnings", "/tmp/x/zil.bt"]


@pytest.fixture
def illumos(monkeypatch, tmp_path):
    """platform.system() says SunOS, and PATH has no dtrace (none can exist on this machine)."""
    monkeypatch.setattr(platform, "system", lambda: "SunOS")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("zfsobs.sources.dtrace.os.path.exists", lambda p: False)


def test_kernel_target_on_illumos_is_pid_0(illumos):
    t = kernel()
    assert t.kind == "kernel" and t.proc == "0"


def test_make_source_without_dtrace_is_one_clear_error(illumos):
    with pytest.raises(ZfsobsError, match="^dtrace not found: .*illumos"):
        make_source(kernel(), ("txg",))


def test_doctor_without_dtrace_fails_with_a_fix(illumos):
    rows, traceable = doctor.checks()
    assert not traceable and rows[0][0] == "FAIL" and rows[0][1] == "dtrace" and "fix:" in rows[0][2]
    out = io.StringIO()
    assert doctor.run(out) == 1 and "nothing can be traced here" in out.getvalue()


def test_doctor_on_freebsd_names_kldload(monkeypatch, illumos):
    rows, _ = doctor_dtrace.checks("FreeBSD")
    assert "kldload dtraceall" in rows[0][2]


def test_required_probes_come_from_the_script_headers():
    assert required_probes(d_script("txg", "SunOS")) == ["sdt:::txg-synced", "sdt:::txg-syncing",
                                                "fbt::spa_sync:entry", "fbt::spa_sync:return"]
    with pytest.raises(ZfsobsError, match="no D script"):
        d_script("nope")


def test_an_sdt_probe_matches_any_function_an_fbt_probe_only_its_own():
    listed = {"sdt::txg_sync_thread:txg-synced", "fbt::spa_sync:entry"}
    assert present("sdt:::txg-synced", listed) and present("fbt::spa_sync:entry", listed)
    assert not present("fbt::spa_sync:return", listed) and not present("sdt:::txg-opened", listed)
    state, detail = doctor_dtrace.metric("txg", listed, "SunOS")
    assert state == "FAIL" and "fbt::spa_sync:return" in detail and "fix:" in detail


def test_probes_list_and_show_the_d_scripts_there(illumos, capsys):
    from zfsobs.cli import main
    assert main(["probes", "list"]) == 0
    assert capsys.readouterr().out.split() == ["throttle", "txg", "vdev_cache", "vdev_queue", "zil"]
    assert main(["probes", "show", "txg"]) == 0
    assert "fbt::spa_sync:entry" in capsys.readouterr().out


def test_on_linux_each_sdt_probe_is_its_stub_function_and_nothing_else_changes():
    illumos, linux = d_script("txg", "SunOS"), d_script("txg", "Linux")
    assert "sdt:::txg-synced" in illumos and "sdt:::" not in linux
    assert required_probes(linux) == ["fbt::trace_zfs_txg__synced:entry", "fbt::trace_zfs_txg__syncing:entry",
                                      "fbt::spa_sync:entry", "fbt::spa_sync:return"]
    assert "\nfbt::trace_zfs_txg__opened:entry\n{" in linux
    assert re.sub(r"fbt::trace_zfs_txg__(\w+):entry", r"sdt:::txg-\1", linux) == illumos
    for name in ("zil", "throttle", "vdev_queue", "vdev_cache"):
        assert d_script(name, "FreeBSD") == d_script(name, "SunOS") and "args[" not in d_script(name, "Linux")


def test_dtraces_own_failing_library_is_named_and_a_copy_without_kernel_types_made(tmp_path):
    lib = tmp_path / "dtrace"
    (lib / "6.10").mkdir(parents=True)
    (lib / "bpf_dlib.o").write_bytes(b"\x7fELF")
    (lib / "6.10" / "io.d").write_text("translator bufinfo_t < struct buffer_head *B > { b_iodone = B->b_end_io; };\n")
    (lib / "6.10" / "errno.d").write_text("inline int EPERM = 1;\n")
    err = (f'dtrace: invalid probe specifier zfs: "{lib}/6.10/io.d", line 52: b_end_io is not a member '
           "of struct buffer_head")      # dtrace 2.0.7 on Linux 7.2, verbatim but the directory
    assert failing_library(err) == str(lib) and failing_library("dtrace: failed to initialize") == ""
    copy = trimmed(str(lib), tmp_path / "cache")
    assert sorted(p.name for p in Path(copy).rglob("*") if p.is_file()) == [".complete", "bpf_dlib.o", "errno.d"]
    assert trimmed(str(lib), tmp_path / "cache") == copy and (lib / "6.10" / "io.d").exists()


def test_dtrace_traces_the_kernel_only():
    from zfsobs.targets.target import Target
    with pytest.raises(ZfsobsError, match="^--tracer dtrace traces the kernel's zfs module, not libzpool"):
        DtraceSource(Target("libzpool", "/usr/lib/x86_64-linux-gnu/libzpool.so.5", "2.1.11"), ("txg",))


SID_FBT = Path(__file__).parent / "data" / "dtrace-fbt-functions-zfs-2.4.4-sid.txt.gz"


def sid_listing() -> set[str]:
    """What `dtrace -l -m zfs` listed in the sid guest (OpenZFS 2.4.4's zfs.ko), as listed_probes gives it."""
    functions = gzip.decompress(SID_FBT.read_bytes()).decode().split()
    return {f"fbt::{f}:{n}" for f in functions for n in ("entry", "return")}


def test_on_openzfs_24_the_vdev_queue_metric_uses_the_openzfs_script_and_the_others_illumos():
    listed = sid_listing()
    assert "fbt::vdev_queue_io:entry" in listed and "fbt::vdev_queue_io_add:entry" not in listed
    flags = lambda: {"ZIO_FLAG_DONT_QUEUE": 1048576}      # noqa: E731
    for name in ("txg", "zil", "throttle"):
        text, why = choose(name, listed, "Linux", flags)
        assert not why and text == d_script(name, "Linux"), why
    text, why = choose("vdev_queue", listed, "Linux", flags)
    assert not why and "(OpenZFS 2.2+)" in text.splitlines()[1] and "& 1048576" in text and "CONST(" not in text
    text, why = choose("vdev_cache", listed, "Linux", flags)
    assert text == "" and why.startswith("probe vdev_cache: not in this kernel") and "vdev_cache_read" in why
    assert "OpenZFS 2.2 and later removed the vdev cache" in why       # the script's Absent line
    assert doctor_dtrace.metric("vdev_cache", listed, "Linux")[0] == "FAIL"
    text, why = choose("vdev_queue", listed, "Linux", lambda: {})
    assert text == "" and "ZIO_FLAG_DONT_QUEUE unknown for this module" in why


def test_on_illumos_the_vdev_queue_metric_uses_illumos_s_own_script():
    listed = {f"fbt::{f}:entry" for f in ("vdev_queue_io_add", "vdev_queue_io_remove", "vdev_queue_pending_add",
                                           "vdev_queue_pending_remove", "vdev_queue_io", "vdev_queue_io_done",
                                           "zio_vdev_io_reissue", "zio_vdev_io_bypass")} | {"fbt::vdev_queue_io:return"}
    text, why = choose("vdev_queue", listed, "SunOS")
    assert not why and text == d_script("vdev_queue", "SunOS")


def test_dtraces_drops_and_errors_on_stderr_count_as_lost_events():
    """What dtrace says on stderr when the kernel had no room (records, dynamic variables, aggregation
    keys) or a clause stopped at a bad read becomes a `lost` event, as bpftrace's "Lost N events"."""
    src = DtraceSource.__new__(DtraceSource)
    src._runtime()
    for line in ("dtrace: 12 drops on CPU 0", "dtrace: 5 dynamic variable drops", "dtrace: 3 aggregation drops on CPU 1",
                 "dtrace: error on enabled probe ID 7 (ID 19344: fbt:zfs:spa_sync:entry): invalid address (0x8) in action #2",
                 "dtrace: description 'fbt::spa_sync:entry' matched 1 probe"):
        if src.lost_re.match(line):
            src._take_line("zil", line)
    lost = [dict(p.split("=", 1) for p in line.split()[4:]) for line in src._take()]
    assert [(f["count"], f["probe"]) for f in lost] == [("12", "zil"), ("5", "zil"), ("3", "zil"), ("1", "zil")]
