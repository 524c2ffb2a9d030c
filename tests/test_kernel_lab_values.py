"""Values on their way into the kernel lab's commands (no guest is booted, no image built): the
image builder run from a checkout whose path holds a space, -o module options (they go into the
guest's setup shell script), --share paths (QEMU -virtfs values and the guest's shares file)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zfsobs.errors import ZfsobsError
from zfsobs.labs import guest
from zfsobs.labs.kernel import KernelLab

CHECKOUT = Path(__file__).resolve().parents[1]

# ensure_image in the copy, with the builder asked only to print its directory (it builds nothing)
ENSURE = """
import sys
from zfsobs.labs import guest
from zfsobs.errors import ZfsobsError
plain = guest.builder_command
guest.builder_command = lambda *a: plain(*a) + ["--print-dir"]
print("expect", guest.image_dir(), file=sys.stderr, flush=True)
try:
    guest.ensure_image()
except ZfsobsError as exc:
    print("error", exc, file=sys.stderr)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="ensure_image builds only as root")
def test_the_builder_runs_from_a_checkout_whose_path_holds_a_space(tmp_path):
    """builder.split() made the old code run `/tmp/.../a` (FileNotFoundError, a traceback)."""
    copy = tmp_path / "a checkout" / "zfsobs"
    shutil.copytree(CHECKOUT / "zfsobs", copy / "zfsobs", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "scripts").mkdir()
    shutil.copy2(CHECKOUT / "scripts" / "kernel-lab-image", copy / "scripts")
    env = dict(os.environ, PYTHONPATH=str(copy), ZFSOBS_KLAB_CACHE=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, "-c", ENSURE], cwd=copy, env=env, capture_output=True,
                         text=True, timeout=120)
    lines = res.stderr.splitlines()
    expect = next(l.split(" ", 1)[1] for l in lines if l.startswith("expect "))
    assert "Traceback" not in res.stderr, res.stderr
    assert expect in lines, res.stderr                                   # the builder ran and printed it
    assert f"building it now with '{copy}/scripts/kernel-lab-image' --print-dir" in res.stderr
    assert any(l.startswith("error building the kernel lab image failed (rc 0)") for l in lines)
    assert not (tmp_path / "cache").exists()                             # --print-dir made nothing
    assert guest.builder_command("btf")[1:] == ["--btf"]


@pytest.mark.parametrize("opt", ["zfs_arc_max=1;reboot", "zfs_arc_max=$(id)", "zfs_arc_max=1 2",
                                 "zfs_arc_max=`id`", "x=1\nreboot", "zfs_arc_max=\u0661", "a;b=1", "Z=1"])
def test_a_module_option_that_is_not_shell_safe_is_refused(opt):
    with pytest.raises(ZfsobsError) as exc:
        guest.parse_module_options([opt])
    assert "use NAME=VALUE" in str(exc.value)


def test_a_module_option_goes_into_the_setup_script_as_one_word():
    options = guest.parse_module_options(["zfs_vdev_cache_size=1048576", "zfs_dbgmsg_enable=1"])
    script = guest.setup_script(guest.LAYOUTS["single"], options)
    assert "modprobe zfs zfs_vdev_cache_size=1048576 zfs_dbgmsg_enable=1\n" in script


@pytest.mark.parametrize("name", ["tab\there", "new\nline", "esc\x1b[2J", "trailing "])
def test_a_share_path_the_guest_cannot_read_back_is_refused(name, tmp_path):
    (tmp_path / name).mkdir()
    with pytest.raises(ZfsobsError) as exc:
        KernelLab(["true"], shares=[str(tmp_path / name)])
    assert "control character or an outer blank" in str(exc.value) and "\n" not in str(exc.value)


def test_share_paths_with_commas_and_spaces_reach_qemu_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("ZFSOBS_KLAB_TMP", str(tmp_path))
    monkeypatch.setenv("ZFSOBS_KLAB_CACHE", str(tmp_path / "cache"))
    share = tmp_path / "my share,id=evil,path=" / "x y"
    share.mkdir(parents=True)
    lab = KernelLab(["true"], shares=[str(share)], layout="single", disk_size="128M")
    try:
        argv = lab._prepare(tmp_path / "img")
        virtfs = [argv[i + 1] for i, a in enumerate(argv) if a == "-virtfs"]
        mine = [v for v in virtfs if "zfsobs_share0" in v]
        assert mine == [f"local,path={str(share).replace(',', ',,')},mount_tag=zfsobs_share0,"
                        "security_model=none,id=share0"]
        assert (lab.dir / "ctl" / "shares").read_text().splitlines()[0] == f"zfsobs_share0 {share}"
        assert oct((tmp_path / "cache" / "layouts").stat().st_mode & 0o777) == "0o700"
    finally:
        lab.stop()


VMWARE = ["-smbios", "type=1,serial=VMware-zfsobs-lab", "-machine", "vmport=on"]


@pytest.mark.parametrize("kernel, accel, n, append, smp, cpu, extra", [
    # before 6.9 the kernel parameter sets it
    ("6.1.0-57-amd64", "tcg", 1024, " possible_cpus=1024", "2", "max", []),
    # from 6.9 only the firmware's list does, counted under a hypervisor Linux knows: KVM's signature,
    # or under TCG a VMware one (no x2APIC there: at most 255)
    ("6.12.57+deb13-amd64", "kvm", 1024, "", "2,maxcpus=1024", "host", []),
    ("6.12.57+deb13-amd64", "tcg", 255, "", "2,maxcpus=255", "max,hypervisor=off", VMWARE),
    # past 255: qemu 10's x2APIC, with interrupt remapping for the IDs past 255
    ("6.12.57+deb13-amd64", "tcg", 1024, "", "2,maxcpus=1024", "max,hypervisor=off",
     ["-smbios", "type=1,serial=VMware-zfsobs-lab", "-machine", "q35,vmport=on",
      "-device", "intel-iommu,intremap=on,eim=on"]),
])
def test_possible_cpus_reach_the_kernel_command_line_or_qemus_smp(kernel, accel, n, append, smp, cpu, extra,
                                                                 tmp_path, monkeypatch):
    monkeypatch.setenv("ZFSOBS_KLAB_TMP", str(tmp_path))
    monkeypatch.setenv("ZFSOBS_KLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ZFSOBS_KLAB_CPU", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    img = tmp_path / "img"
    img.mkdir()
    (img / "manifest").write_text(f"flavour stock\nkernel {kernel}\n")
    monkeypatch.setattr(guest, "qemu_version", lambda binary: (10, 0))
    lab = KernelLab(["true"], layout="single", disk_size="128M", possible_cpus=n)
    lab.accel = accel
    try:
        argv = lab._prepare(img)
        cmdline = argv[argv.index("-append") + 1]
        assert argv[argv.index("-smp") + 1] == smp and argv[argv.index("-cpu") + 1] == cpu
        assert argv[argv.index("-m") - len(extra):argv.index("-m")] == extra
        # room for the probes' per-CPU maps on every possible CPU (docs/performance.md)
        assert argv[argv.index("-m") + 1] == f"{2048 + 8 * n}M"
        assert cmdline.endswith("modprobe.blacklist=kvm,kvm_amd,kvm_intel" + append)
        assert f"ZFSOBS_KLAB_POSSIBLE_CPUS={n}\n" in (lab.dir / "ctl" / "env").read_text()
    finally:
        lab.stop()


def test_the_qemu_to_run_is_one_program_path_never_a_shell_line(tmp_path, monkeypatch):
    """ZFSOBS_KLAB_QEMU is run as it is, a program's path: asked its version, a value with shell
    syntax in it runs nothing else and reads as no version."""
    hostile = f"{tmp_path}/qemu; touch {tmp_path}/ran $(touch {tmp_path}/ran2)"
    monkeypatch.setenv("ZFSOBS_KLAB_QEMU", hostile)
    assert guest.qemu_binary() == hostile
    assert guest.qemu_version(guest.qemu_binary()) == (0, 0)
    assert not (tmp_path / "ran").exists() and not (tmp_path / "ran2").exists()


def test_more_possible_cpus_than_tcg_has_apic_ids_for_is_refused_on_a_6_9_kernel(tmp_path, monkeypatch):
    monkeypatch.setattr(guest, "qemu_version", lambda binary: (7, 2))
    monkeypatch.setenv("ZFSOBS_KLAB_TMP", str(tmp_path))
    monkeypatch.setenv("ZFSOBS_KLAB_CACHE", str(tmp_path / "cache"))
    img = tmp_path / "img"
    img.mkdir()
    (img / "manifest").write_text("flavour stock\nkernel 6.12.118+deb13-amd64\n")
    lab = KernelLab(["true"], layout="single", disk_size="128M", possible_cpus=256)
    lab.accel = "tcg"
    try:
        with pytest.raises(ZfsobsError, match=r"--possible-cpus 256: Linux 6.12.118\+deb13-amd64 under qemu "
                                              r"7.2's TCG \(no x2APIC\) takes at most 255; qemu 10.0 or later"):
            lab._prepare(img)
    finally:
        lab.stop()


def test_without_possible_cpus_the_guest_has_its_vcpus_only(tmp_path, monkeypatch):
    monkeypatch.setenv("ZFSOBS_KLAB_TMP", str(tmp_path))
    monkeypatch.setenv("ZFSOBS_KLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    lab = KernelLab(["true"], layout="single", disk_size="128M")
    try:
        argv = lab._prepare(tmp_path / "img")
        assert argv[argv.index("-smp") + 1] == "2" and "possible_cpus" not in argv[argv.index("-append") + 1]
        assert argv[argv.index("-m") + 1] == "2048M"
        assert "POSSIBLE_CPUS" not in (lab.dir / "ctl" / "env").read_text()
    finally:
        lab.stop()


@pytest.mark.parametrize("n", [1, 8193])
def test_a_possible_cpu_count_debians_kernels_cannot_have_is_refused(n):
    with pytest.raises(ZfsobsError, match="from 2 to 8192"):
        KernelLab(["true"], possible_cpus=n)
