"""Bad input gets one clear line and a non-zero exit, never a traceback."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

ZFSOBS = [sys.executable, "-m", "zfsobs"]


def run(*args, user=None, **kw):
    cmd = ZFSOBS + list(args)
    if user:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)


def one_line_error(res, pattern):
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("zfsobs: ") and pattern in lines[0], res.stderr


def test_foreign_truncated_and_missing_captures(tmp_path, capture_path):
    foreign = tmp_path / "foreign"
    foreign.write_bytes(b"PK\x03\x04 a zip file")
    one_line_error(run("report", str(foreign)), "not a zfsobs capture")
    one_line_error(run("replay", str(tmp_path / "none")), "no such file")
    # a capture cut inside its header record is unreadable; cut later it reports what it has
    data = open(capture_path, "rb").read()
    cut = tmp_path / "cut.cap"
    cut.write_bytes(data[:40])
    one_line_error(run("report", str(cut)), "header missing or damaged")
    cut.write_bytes(data[: len(data) * 2 // 3])
    res = run("report", str(cut), "--format", "json")
    assert res.returncode == 0 and "warning" in res.stderr and "Traceback" not in res.stderr


def test_bad_arguments():
    one_line_error(run("probes", "show", "nope"), "no probe script 'nope'")
    one_line_error(run("probes", "show", "txg", "--target", "/no/such/lib.so"), "no such library")
    one_line_error(run("probes", "show", "txg", "--target", "solaris"), "unknown target")
    one_line_error(run("zilstat", "often"), "interval: not a number")
    one_line_error(run("zilstat", "1", "0"), "count must be >= 1")
    one_line_error(run("zilstat", "--workload", "zil", "1"), "for the lab only")
    one_line_error(run("top", "--lab", "--workload", "nfs"), "no lab workload 'nfs'")
    res = run("report", "x", "--format", "xml")
    assert res.returncode == 2 and "invalid choice" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to drop it")
def test_not_root(tmp_path):
    one_line_error(run("top", "--target", "libzpool", user=65534, cwd=tmp_path), "needs root")
    one_line_error(run("record", "--lab", "-O", str(tmp_path / "x"), user=65534, cwd=tmp_path), "needs root")


def test_no_bpftrace(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (the root check comes first)")
    os.symlink(shutil.which("nm"), tmp_path / "nm")  # a PATH without bpftrace (nm reads the library)
    env = dict(os.environ, PATH=str(tmp_path))
    res = run("top", "--target", "libzpool", env=env)
    one_line_error(res, "bpftrace not found")


def test_no_kernel_zfs_here():
    if os.path.isdir("/sys/module/zfs"):
        pytest.skip("this machine has kernel ZFS")
    one_line_error(run("probes", "show", "txg", "--target", "kernel"), "zfs kernel module is not loaded")


@pytest.mark.parametrize("path, pattern", [
    ("/nonexistent/libzpool.so", "no such library"),
    ("/etc/passwd", "not an ELF shared library"),
    ("/usr/lib", "is a directory"),
    ("/bin/sh", "not a libzpool (no spa_sync)"),          # an ELF without ZFS in it
])
def test_a_wrong_target_path(path, pattern, tmp_path):
    one_line_error(run("probes", "show", "txg", "--target", path), pattern)
    if os.geteuid() == 0 and shutil.which("bpftrace"):
        one_line_error(run("record", "--target", path, "-O", str(tmp_path / "x.cap"), "--duration", "1"), pattern)
        assert not (tmp_path / "x.cap").exists()


def test_lab_option_must_be_a_tunable(tmp_path):
    one_line_error(run("lab", "-o", "garbage"), "expected NAME=INTEGER")
    one_line_error(run("top", "-o", "zfs_txg_timeout=1", "--target", "libzpool"), "lab only")
    # -o is a tunable in record too; its old meaning (-o FILE) with -O is refused, not a second file
    one_line_error(run("record", "--lab", "-o", str(tmp_path / "b"), "-O", str(tmp_path / "c")),
                   "-o takes NAME=VALUE (a lab tunable); the output file is -O FILE")


def test_zfs_version_choice(tmp_path):
    one_line_error(run("lab", "--zfs", "2.5"), "no lab for OpenZFS '2.5' (have: 2.1, 2.3)")
    one_line_error(run("record", "--lab", "--zfs", "9", "-O", str(tmp_path / "c")), "(have: 2.1, 2.3)")
    one_line_error(run("top", "--zfs", "2.3", "--target", "libzpool"), "for the lab only")
    one_line_error(run("vqstat", "--zfs", "2.3"), "for the lab only")
    assert not (tmp_path / "c").exists()


def test_zfs_23_not_installed(monkeypatch, capsys):
    from zfsobs import cli
    from zfsobs.labs import userland as lab
    gone = "/nonexistent/openzfs-2.3"
    monkeypatch.setitem(lab.BUILDS, "2.3", lab.Build(f"{gone}/sbin/ztest", f"{gone}/lib", f"{gone}/sbin/zdb"))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        assert cli.main(["lab", "--zfs", "2.3"]) != 0
    finally:    # `lab` makes SIGTERM/SIGHUP raise; not in pytest's process
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("zfsobs: ") and "run ./scripts/setup" in err, err


def test_record_refuses_to_overwrite(tmp_path):
    existing = tmp_path / "x.cap"
    existing.write_text("keep me")
    one_line_error(run("record", "--lab", "-O", str(existing)), "exists")
    assert existing.read_text() == "keep me"


def test_record_probes_takes_only_default_probe_names(tmp_path):
    res = run("record", "--lab", "--probes", "zil,nope", "-O", str(tmp_path / "x.cap"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "--probes: not a probe: nope" in res.stderr, res.stderr
    from zfsobs.cli_parser import probe_list
    assert probe_list("zil") == ("txg", "zil") and probe_list("throttle,txg") == ("txg", "throttle")


def test_probes_list_and_show():
    res = run("probes", "list")
    assert res.returncode == 0 and "txg" in res.stdout.split()
    if os.path.exists("/usr/sbin/ztest"):
        res = run("probes", "show", "txg", "--target", "libzpool")
        assert res.returncode == 0 and "uretprobe:" in res.stdout


def test_doctor_runs():
    res = run("doctor", "--quick")      # the probe loads: tests/test_probe_load.py
    assert "Traceback" not in res.stderr and "verdict:" in res.stdout
    assert res.returncode in (0, 1)


def test_bpftrace_too_old(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (the root check comes first)")
    fake = tmp_path / "bpftrace"             # answers --version like Debian 11's bpftrace
    fake.write_text("#!/bin/sh\necho bpftrace v0.11.3\n")
    fake.chmod(0o755)
    res = run("top", "--target", "libzpool", env=dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}"))
    one_line_error(res, "is bpftrace v0.11.3; the probes need 0.17 or newer")
    doctor = run("doctor", env=dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}"))
    assert "the probes need 0.17 or newer (Debian 12 ships 0.17: apt-get install bpftrace)" in doctor.stdout


def test_a_binary_that_is_not_bpftrace_is_refused_in_one_line(tmp_path):
    """`--bpftrace /bin/false`: its seven-line --version banner became the version, pasted into
    doctor's checks, and tracing went on with it."""
    if os.geteuid() != 0:
        pytest.skip("needs root (the root check comes first)")
    res = run("top", "--lab", "--bpftrace", "/bin/false")
    one_line_error(res, "/bin/false is not bpftrace: its --version says 'false (GNU coreutils)")
    doctor = run("doctor", "--quick", "--bpftrace", "/bin/false")
    line, = [line for line in doctor.stdout.splitlines() if " bpftrace " in line]
    assert line.startswith("FAIL") and "Copyright" not in doctor.stdout, line


def test_doctor_names_a_target_s_unknown_offsets_once():
    from zfsobs.doctor.report import grouped
    notes = [f"offset zfs_vdev_{c}_max_active unknown for libzpool 2.3.2 (/x/libzpool.so.6)" for c in "ab"]
    assert grouped(notes + ["block foo dropped"]) == [
        "block foo dropped", "offsets unknown for libzpool 2.3.2 (/x/libzpool.so.6) (2): "
        "zfs_vdev_a_max_active, zfs_vdev_b_max_active"]


@pytest.mark.parametrize("out", ["/proc/zfsobs-x", "/sys/zfsobs-x"])
def test_output_that_cannot_be_created_fails_before_the_lab(out, tmp_path):
    """issue 42 item 2: -O on /proc or /sys was refused only after the probes and the lab started
    (7-15 s); now one line, before anything starts (the lab's dir is never made)."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    began = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "zfsobs", "record", "--lab", "-O", out, "--duration", "2"],
                       capture_output=True, text=True, timeout=60, env=env)
    took = time.monotonic() - began
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and "cannot create capture" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert took < 5, took     # the probes' start alone took ~7 s
    assert not os.path.exists(out)


@pytest.mark.parametrize("args, line", [
    (["top", "--lab", "--bpftrace", "/etc/passwd"], "--bpftrace /etc/passwd: not an executable file"),
    (["top", "--lab", "--bpftrace", "/nonexistent/bpftrace"], "--bpftrace /nonexistent/bpftrace: not found"),
    (["report", "--compare", "--format", "openmetrics", "x.cap"], "report --compare: --format text, json or csv"),
])
def test_what_a_new_user_mistypes_gets_a_line_that_names_it(args, line):
    """Each said something else (issue 42, item 8; a negative tunable: test_cli_robust.py):
    'bpftrace not found (ZFSOBS_BPFTRACE=...)' naming a variable nobody set, and --compare's
    OpenMetrics printed the text report."""
    if os.geteuid() != 0 and args[0] == "top":
        pytest.skip("needs root (the root check comes first)")
    one_line_error(run(*args), line)


def test_a_truncated_capture_s_warnings_show_once(tmp_path, capture_path):
    cut = tmp_path / "cut.cap"
    cut.write_bytes(open(capture_path, "rb").read()[:30000])
    text = run("report", str(cut))
    assert text.returncode == 0 and "zfsobs: warning" not in text.stderr, text.stderr
    assert "warning: no trailer" in text.stdout
    csv = run("report", str(cut), "--format", "csv")
    assert csv.stderr.count("no trailer") == 1 and "no trailer" not in csv.stdout


def test_every_argument_says_what_it_takes():
    from zfsobs.cli_parser import parser
    sub = next(a for a in parser()._actions if a.dest == "cmd")
    bare = [f"{name} {a.dest}" for name, p in sub.choices.items() for a in p._actions
            if not a.help and a.dest != "help"]
    assert bare == [], bare
    assert "vdev_queue" in sub.choices["report"].format_help()      # --section's choices
