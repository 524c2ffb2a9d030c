"""The kernel lab: its fast parts (no guest is built or booted for them): arguments, layouts, sizes,
the KVM probe, the image cache key. And two guests, marked `kernel` (minutes under TCG;
docs/kernel-lab.md), each run in the guest lanes of tests/kernel_images.py: a command's output and
exit status, and the live view on a host terminal."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import kernel_lab_ready, load_capture
from test_cli import one_line_error, run
from zfsobs.labs import guest as kernel_guest, kernel as kernel_lab
from zfsobs.errors import ZfsobsError


def test_layouts_build_the_pool_spec():
    assert kernel_guest.parse_layout("mirror-log").vdev_spec() == \
        ["mirror", "/dev/vdb", "/dev/vdc", "log", "/dev/vdd"]
    assert kernel_guest.parse_layout("mirror").vdev_spec() == ["mirror", "/dev/vdb", "/dev/vdc"]
    assert kernel_guest.parse_layout("single").vdev_spec() == ["/dev/vdb"]
    setup = kernel_guest.setup_script(kernel_guest.LAYOUTS["single"])
    assert "zpool create" in setup and "fio" not in setup
    with pytest.raises(ZfsobsError, match="no layout 'raidz'"):
        kernel_guest.parse_layout("raidz")


@pytest.mark.parametrize("text,size", [("2G", 2 << 30), ("512M", 512 << 20), ("1.5g", 3 << 29),
                                       ("1GiB", 1 << 30), (str(256 << 20), 256 << 20)])
def test_sizes(text, size):
    assert kernel_guest.parse_size(text) == size


@pytest.mark.parametrize("text,msg", [("big", "not a size"), ("-1G", "not a size"), ("1M", "too small")])
def test_bad_sizes(text, msg):
    with pytest.raises(ZfsobsError, match=msg):
        kernel_guest.parse_size(text)


def test_accel_probe_answers_kvm_or_tcg(monkeypatch):
    monkeypatch.delenv("ZFSOBS_KLAB_ACCEL", raising=False)
    accel, why = kernel_guest.probe_accel()
    assert accel in ("kvm", "tcg") and why
    if os.path.isdir("/sys/module/kvm_pvm"):
        assert accel == "tcg"       # PVM KVM cannot run a stock guest usefully
    monkeypatch.setenv("ZFSOBS_KLAB_ACCEL", "tcg")
    assert kernel_guest.probe_accel()[0] == "tcg"
    monkeypatch.setenv("ZFSOBS_KLAB_ACCEL", "hvf")
    with pytest.raises(ZfsobsError, match="use kvm or tcg"):
        kernel_guest.probe_accel()


def test_tcg_threading_is_multi_or_single_and_nothing_else(monkeypatch):
    monkeypatch.delenv("ZFSOBS_KLAB_TCG_THREAD", raising=False)
    assert kernel_guest.tcg_thread() == "multi"
    monkeypatch.setenv("ZFSOBS_KLAB_TCG_THREAD", "single")
    assert kernel_guest.tcg_thread() == "single"
    monkeypatch.setenv("ZFSOBS_KLAB_TCG_THREAD", "multi,tb-size=1 -d in_asm")
    with pytest.raises(ZfsobsError, match="multi or single"):
        kernel_guest.tcg_thread()


def test_cache_key_follows_the_recipe_the_flavour_and_the_distro(tmp_path, monkeypatch):
    recipe = tmp_path / "recipe"
    recipe.write_text("#!/bin/bash\necho one\n")
    first = kernel_guest.recipe_key(recipe)
    assert kernel_guest.recipe_key(recipe) == first != kernel_guest.recipe_key(recipe, "btf")
    assert first != kernel_guest.recipe_key(recipe, distro="trixie")
    recipe.write_text("#!/bin/bash\necho two\n")
    assert kernel_guest.recipe_key(recipe) != first
    # the builder script computes the same key and directory as the package, per image
    monkeypatch.setenv("ZFSOBS_KLAB_CACHE", str(tmp_path / "cache"))
    dirs = set()
    for distro, flavour in kernel_guest.IMAGES:
        args = kernel_guest.builder_command(flavour, distro)
        out = subprocess.run([*args, "--print-dir"], capture_output=True, text=True,
                             env=dict(os.environ), check=True).stdout.strip()
        key = kernel_guest.recipe_key(flavour=flavour, distro=distro)
        assert out == str(kernel_guest.image_dir(flavour=flavour, distro=distro)) \
            == str(tmp_path / "cache" / f"{distro}-{flavour}-{key}")
        dirs.add(out)
    assert len(dirs) == len(kernel_guest.IMAGES)
    with pytest.raises(ZfsobsError, match="no kernel lab image flavour 'x'"):
        kernel_guest.image_dir(flavour="x")
    with pytest.raises(ZfsobsError, match="no kernel lab distro 'buster'"):
        kernel_guest.image_dir(distro="buster")
    with pytest.raises(ZfsobsError, match="btf flavour for bookworm only"):
        kernel_guest.image_dir(flavour="btf", distro="trixie")
    res = subprocess.run([str(kernel_guest.BUILDER), "--distro", "trixie", "--btf", "--print-dir"],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "--btf is built for bookworm only" in res.stderr


def test_argument_errors_are_one_line():
    one_line_error(run("lab", "--kernel"), "give the command to run in the guest")
    one_line_error(run("lab", "--kernel", "--layout", "raidz", "--", "true"), "no layout 'raidz'")
    one_line_error(run("lab", "--kernel", "--disk-size", "lots", "--", "true"), "not a size")
    one_line_error(run("lab", "--kernel", "--zfs", "2.3", "--", "true"), "userland lab only")
    one_line_error(run("lab", "--layout", "mirror"), "only with --kernel")
    one_line_error(run("lab", "--btf"), "--btf: only with --kernel")
    one_line_error(run("lab", "--distro", "trixie"), "--distro: only with --kernel")
    one_line_error(run("lab", "--kernel", "--distro", "buster", "--", "true"), "no kernel lab distro 'buster'")
    one_line_error(run("lab", "--", "true"), "only with --kernel")
    one_line_error(run("lab", "--kernel", "--", "true", env=dict(os.environ, ZFSOBS_KLAB_TCG_THREAD="multi -S")),
                   "ZFSOBS_KLAB_TCG_THREAD='multi -S': multi or single")


def test_missing_image_without_build_names_the_builder(tmp_path, monkeypatch):
    monkeypatch.setenv("ZFSOBS_KLAB_CACHE", str(tmp_path))
    with pytest.raises(ZfsobsError, match="kernel-lab-image$"):
        kernel_guest.ensure_image(build=False)
    with pytest.raises(ZfsobsError, match="kernel-lab-image --btf$"):
        kernel_guest.ensure_image(build=False, flavour="btf")
    with pytest.raises(ZfsobsError, match="kernel-lab-image --distro trixie-backports$"):
        kernel_guest.ensure_image(build=False, distro="trixie-backports")


def test_list_shows_every_image_and_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ZFSOBS_KLAB_CACHE", str(tmp_path))
    built = kernel_guest.image_dir(distro="trixie")
    built.mkdir()
    (built / "complete").write_text("2026-11-24T00:00:00Z\n")
    (built / "manifest").write_text("flavour stock\nkernel 6.12.0-1-amd64\nzfs-dkms 2.3.9-1\nbpftrace 0.23.2-1\n")
    res = run("lab", "--kernel", "--list", env=dict(os.environ, ZFSOBS_KLAB_CACHE=str(tmp_path)))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert any(line.startswith("--distro trixie ") and "built: kernel 6.12.0-1-amd64, zfs-dkms 2.3.9-1, "
               "bpftrace 0.23.2-1" in line for line in lines), res.stdout
    assert any(line.startswith("--distro bookworm --btf") and "not built (" in line and "--btf)" in line
               for line in lines), res.stdout
    assert sum(str(tmp_path) in line for line in lines) == len(kernel_guest.IMAGES)


def test_builder_rejects_unknown_arguments():
    res = subprocess.run([str(kernel_guest.BUILDER), "--bogus"], capture_output=True, text=True)
    assert res.returncode != 0 and "unknown argument: --bogus" in res.stderr


def test_module_options_are_set_at_load_and_checked():
    opts = kernel_guest.parse_module_options(["zfs_vdev_cache_size=1048576", "zfs_txg_timeout=1"])
    assert opts == [("zfs_vdev_cache_size", "1048576"), ("zfs_txg_timeout", "1")]
    setup = kernel_guest.setup_script(kernel_guest.LAYOUTS["mirror"], opts)
    assert "modprobe zfs zfs_vdev_cache_size=1048576 zfs_txg_timeout=1" in setup
    assert "/sys/module/zfs/parameters/zfs_txg_timeout ]" in setup   # modprobe only warns on a typo
    for bad in ("zfs_txg_timeout", "zfs_txg_timeout=1;reboot", "Zfs=1", "a=$(x)"):
        with pytest.raises(ZfsobsError, match="NAME=VALUE"):
            kernel_guest.parse_module_options([bad])


def test_workloads_start_fio_in_the_background():
    for name in ("mix", "sync-write", "random-read"):
        setup = kernel_guest.setup_script(kernel_guest.LAYOUTS["mirror"], workload=name)
        assert "primarycache=none zfsobs_klab/work" in setup and "setsid fio " in setup
    assert "--rwmixread=70" in kernel_guest.WORKLOADS["mix"]
    with pytest.raises(ZfsobsError, match="no kernel lab workload 'oltp'"):
        kernel_guest.parse_workload("oltp")


def test_share_must_be_a_directory(tmp_path):
    one_line_error(run("lab", "--kernel", "--share", str(tmp_path / "nope"), "--", "true"), "not a directory")
    one_line_error(run("lab", "--kernel", "--workload", "oltp", "--", "true"), "no kernel lab workload")
    one_line_error(run("lab", "--kernel", "-o", "zfs_txg_timeout", "--", "true"), "NAME=VALUE")


NEEDS = {"top": "top", "command": "command"}      # the guest each fixture waits for (tests/kernel_images.py)


def command_in_the_guest(out: Path) -> None:
    """`zfsobs lab --kernel --workload none -- sh -c ...` on the default image: its stdout, stderr and
    exit status into OUT. Run in a guest lane (tests/kernel_images.py), beside the other guests."""
    cmd = [sys.executable, "-m", "zfsobs", "lab", "--kernel", "--workload", "none", "--", "sh", "-c",
           "zpool list -H -o name; ls /sys/kernel/btf/zfs 2>/dev/null || echo no-module-btf; "
           "ls /var/lib/dkms/zfs/*/$(uname -r)/*/zfs_config.h /usr/src/zfs-*/module/Kbuild.in; "
           "echo to-stderr >&2; exit 7"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    (out / "stdout").write_text(res.stdout)
    (out / "stderr").write_text(res.stderr)
    (out / "status").write_text(f"{res.returncode}\n")


@pytest.fixture
def command(request):
    from kernel_images import guest_out
    return guest_out("command", request)


@pytest.mark.kernel
@pytest.mark.skipif(bool(kernel_lab_ready()), reason=kernel_lab_ready() or "ready")
def test_guest_runs_a_command_on_the_pool(command):
    """The default image is a stock DKMS build: the module has no BTF, its source and zfs_config.h
    are where DKMS leaves them (what zfsobs/targets/layouts.py compiles from). The command's stdout,
    stderr and exit status come back apart."""
    err = (command / "stderr").read_text()
    assert (command / "status").read_text().strip() == "7", err[-2000:]
    out = (command / "stdout").read_text().split()
    assert out[:2] == ["zfsobs_klab", "no-module-btf"] and len(out) == 4, out
    assert out[2] == "/usr/src/zfs-2.1.11/module/Kbuild.in" and out[3].endswith("/x86_64/zfs_config.h"), out
    assert "to-stderr" in err


def top_in_the_guest(out: Path) -> None:
    """`zfsobs lab --kernel -- zfsobs top -O OUT/k.cap` on an 80x24 pty until its screen shows the
    guest's pool, then SIGINT to `lab --kernel`: what the terminal got, stderr and the exit status
    into OUT. Run in a guest lane (tests/kernel_images.py), beside the other guests."""
    import fcntl
    import pty
    import select
    import struct
    import termios
    cap = out / "k.cap"
    master, slave = pty.openpty()
    # a classic 80x24 terminal: the shortest the screen is made to fit with every panel on it
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    # --console: the guest's console in err.txt too (a workload that stalls in the guest shows why there)
    with open(out / "err.txt", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "zfsobs", "lab", "--kernel", "--console", "--share", str(out),
                                 "--", "python3", "-m", "zfsobs", "top", "-O", str(cap)], stdin=subprocess.DEVNULL,
                                stdout=slave, stderr=err, text=True,
                                env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")})
    os.close(slave)
    screen, sent, deadline = b"", None, time.monotonic() + 900
    try:
        while True:
            if sent is None and cap.exists() and cap.stat().st_size > 16384 and b"vdev queue zfsobs_klab" in screen:
                time.sleep(5)                                       # a few more frames, then ctrl-c
                proc.send_signal(signal.SIGINT)
                sent = time.monotonic()
            assert time.monotonic() < deadline, screen.decode(errors="replace")[-3000:]
            if not select.select([master], [], [], 1)[0]:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:          # the pty closes when the lab exits
                break
            if not chunk:
                break
            screen += chunk
        status = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
        (out / "screen.txt").write_bytes(screen)
    (out / "status").write_text(f"{status} {'sent' if sent is not None else 'not-sent'}\n")


@pytest.fixture
def top(request):
    from kernel_images import guest_out
    return guest_out("top", request)


@pytest.mark.kernel
@pytest.mark.skipif(bool(kernel_lab_ready()), reason=kernel_lab_ready() or "ready")
def test_top_in_the_guest_draws_on_the_host_terminal_and_ctrl_c_keeps_its_capture(top):
    """The issue's acceptance: `zfsobs lab --kernel -- zfsobs top` on a terminal shows the live view
    of the guest's kernel pool, with the mix workload moving every panel. Then SIGINT to `lab
    --kernel` is passed to the command in the guest: top stops as on a host, its capture (-O, through
    --share) complete and readable on the host. One boot and one attach for both (minutes under TCG)."""
    err = (top / "err.txt").read_text()
    assert (top / "status").read_text().split() == ["0", "sent"], err[-2000:]
    text = (top / "screen.txt").read_bytes().decode(errors="replace")
    assert "\x1b[" in text                                      # drawn as a live terminal view
    assert "vdev queue zfsobs_klab" in text and "kernel · OpenZFS 2.1.11" in text, text[-3000:]
    assert "SIGINT passed to the command in the guest" in err, err[-2000:]
    capture, _, zil = load_capture(top / "k.cap", "zil")
    assert capture.meta["target"]["kind"] == "kernel" and capture.trailer and not capture.warnings, capture.warnings
    assert sum(ev.fields["commits"] for ev in zil) > 0          # the mix workload's fsyncs
