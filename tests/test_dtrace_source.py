"""The dtrace runner and doctor on illumos/FreeBSD, run here with a fake platform value only where
a real dtrace cannot exist (no probe output is faked: without dtrace they must stop with one line)."""
from __future__ import annotations

import io
import platform

import pytest

from zfsobs.doctor import report as doctor, dtrace as doctor_dtrace
from zfsobs.sources.dtrace import DtraceSource, command_line, make_source, present, required_probes, d_script
from zfsobs.errors import ZfsobsError
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
    assert command_line("/usr/sbin/dtrace", "/tmp/x/txg.bt", "tank") == \
        ["/usr/sbin/dtrace", "-q", "-Z", "-s", "/tmp/x/txg.bt", "tank", "1"]
    src = DtraceSource.__new__(DtraceSource)
    src.bpftrace, src.pool = "/usr/sbin/dtrace", ""
    assert src.command("/tmp/x/zil.bt") == ["/usr/sbin/dtrace", "-q", "-Z", "-s", "/tmp/x/zil.bt", "", "1"]
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
    assert required_probes(d_script("txg")) == ["sdt:::txg-synced", "sdt:::txg-syncing",
                                                "fbt::spa_sync:entry", "fbt::spa_sync:return"]
    with pytest.raises(ZfsobsError, match="no D script"):
        d_script("nope")


def test_an_sdt_probe_matches_any_function_an_fbt_probe_only_its_own():
    listed = {"sdt::txg_sync_thread:txg-synced", "fbt::spa_sync:entry"}
    assert present("sdt:::txg-synced", listed) and present("fbt::spa_sync:entry", listed)
    assert not present("fbt::spa_sync:return", listed) and not present("sdt:::txg-opened", listed)
    state, detail = doctor_dtrace.metric(d_script("txg"), listed)
    assert state == "FAIL" and "fbt::spa_sync:return" in detail and "fix:" in detail


def test_probes_list_and_show_the_d_scripts_there(illumos, capsys):
    from zfsobs.cli import main
    assert main(["probes", "list"]) == 0
    assert capsys.readouterr().out.split() == ["throttle", "txg", "vdev_cache", "vdev_queue", "zil"]
    assert main(["probes", "show", "txg"]) == 0
    assert "fbt::spa_sync:entry" in capsys.readouterr().out
