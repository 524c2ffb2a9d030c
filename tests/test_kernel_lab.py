"""The kernel lab's fast parts (no guest is built or booted here): arguments, layouts, sizes, the KVM
probe, the image cache key. The one test that boots a guest is marked `kernel` and runs only with
ZFSOBS_KERNEL_LAB=1 (minutes under TCG; docs/kernel-lab.md)."""
import os
import subprocess
import sys

import pytest

from test_cli import one_line_error, run
from zfsobs import kernel_guest, kernel_lab
from zfsobs.errors import ZfsobsError


def test_layouts_build_the_pool_spec():
    assert kernel_guest.parse_layout("mirror-log").vdev_spec() == \
        ["mirror", "/dev/vdb", "/dev/vdc", "log", "/dev/vdd"]
    assert kernel_guest.parse_layout("mirror").vdev_spec() == ["mirror", "/dev/vdb", "/dev/vdc"]
    assert kernel_guest.parse_layout("single").vdev_spec() == ["/dev/vdb"]
    assert "zpool create" in kernel_guest.setup_script(kernel_guest.LAYOUTS["single"])
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


def test_cache_key_follows_the_recipe(tmp_path, monkeypatch):
    recipe = tmp_path / "recipe"
    recipe.write_text("#!/bin/bash\necho one\n")
    first = kernel_guest.recipe_key(recipe)
    assert kernel_guest.recipe_key(recipe) == first
    recipe.write_text("#!/bin/bash\necho two\n")
    assert kernel_guest.recipe_key(recipe) != first
    # the builder script computes the same key and directory as the package
    monkeypatch.setenv("ZFSOBS_KLAB_CACHE", str(tmp_path / "cache"))
    out = subprocess.run([str(kernel_guest.BUILDER), "--print-dir"], capture_output=True, text=True,
                         env=dict(os.environ), check=True).stdout.strip()
    assert out == str(kernel_guest.image_dir()) == str(tmp_path / "cache" / f"bookworm-{kernel_guest.recipe_key()}")


def test_argument_errors_are_one_line():
    one_line_error(run("lab", "--kernel"), "give the command to run in the guest")
    one_line_error(run("lab", "--kernel", "--layout", "raidz", "--", "true"), "no layout 'raidz'")
    one_line_error(run("lab", "--kernel", "--disk-size", "lots", "--", "true"), "not a size")
    one_line_error(run("lab", "--kernel", "--zfs", "2.3", "--", "true"), "userland lab only")
    one_line_error(run("lab", "--layout", "mirror"), "only with --kernel")
    one_line_error(run("lab", "--", "true"), "only with --kernel")


def test_missing_image_without_build_names_the_builder(tmp_path, monkeypatch):
    monkeypatch.setenv("ZFSOBS_KLAB_CACHE", str(tmp_path))
    with pytest.raises(ZfsobsError, match="kernel-lab-image"):
        kernel_guest.ensure_image(build=False)


def test_builder_rejects_unknown_arguments():
    res = subprocess.run([str(kernel_guest.BUILDER), "--bogus"], capture_output=True, text=True)
    assert res.returncode != 0 and "unknown argument: --bogus" in res.stderr


@pytest.mark.kernel
@pytest.mark.skipif(os.environ.get("ZFSOBS_KERNEL_LAB") != "1", reason="boots a guest: set ZFSOBS_KERNEL_LAB=1")
def test_guest_runs_a_command_on_the_pool():
    cmd = [sys.executable, "-m", "zfsobs", "lab", "--kernel", "--", "sh", "-c",
           "zpool list -H -o name; ls /sys/kernel/btf/zfs; echo to-stderr >&2; exit 7"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert res.returncode == 7, res.stderr
    assert res.stdout.split() == ["zfsobs_klab", "/sys/kernel/btf/zfs"]
    assert "to-stderr" in res.stderr
