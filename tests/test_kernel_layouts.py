"""Compiled struct layouts (zfsobs/layouts.py) against the module's own BTF, for the same build: one
kernel lab guest of the --btf image (zfs-dkms 2.1.11 built with module BTF; its source, zfs_config.h
and kernel headers are what the stock image has too) runs scripts/kernel-layouts, which compiles
every probe name and every member offset of the structs they read, and looks each up in
/sys/kernel/btf/zfs. Under TCG ~3 min (the compile, nothing cached, ~1 of it). On the stock image
the same layouts drive every probe: tests/test_kernel_fidelity.py."""
from __future__ import annotations

import json

import pytest

from conftest import guest_run, kernel_lab_ready

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(bool(kernel_lab_ready("btf")), reason=kernel_lab_ready("btf") or "ready")]


@pytest.fixture(scope="module")
def got(tmp_path_factory):
    out = guest_run(tmp_path_factory, "ZFSOBS_LAYOUTS_DIR", "kernel-layouts", timeout=1800,
                    lab=("--btf", "--workload", "none"))
    return json.loads((out / "layouts.json").read_text())


def test_every_probe_offset_compiled_equals_the_modules_btf(got):
    names = got["probe_names"]
    assert len(names) >= 24 and {"zio.io_vd", "vdev_queue.class_queued", "ZIO_FLAG_DONT_QUEUE"} <= set(names)
    compiled = {n: got["compiled"].get(n) for n in names}
    btf = {n: got["btf"].get(n) for n in names}
    assert compiled == btf and None not in compiled.values(), {n: (compiled[n], btf[n]) for n in names
                                                               if compiled[n] != btf[n]}
    # it was compiled here, with the module's own flags, against the running kernel's tree
    assert got["how"].startswith("compiled in ") and got["inputs"]["src"] == "/usr/src/zfs-2.1.11"
    assert got["inputs"]["config"].startswith("/var/lib/dkms/zfs/2.1.11/") and \
        got["inputs"]["build"].startswith("/lib/modules/")
    assert {"-D_KERNEL", "-UDEBUG", "-DNDEBUG", "-std=gnu99"} <= set(got["flags"])


def test_every_member_of_the_structs_they_read_equals_the_modules_btf(got):
    """Not only the names the probes use: every named member offset and the size of zio, vdev,
    vdev_queue, zilog, lwb, itx and dsl_pool, so a flag or config macro that moved anything shows."""
    assert got["structs"] == ["dsl_pool", "itx", "lwb", "vdev", "vdev_queue", "zilog", "zio"]
    assert got["compiled"] == got["btf"], {n: (got["compiled"].get(n), got["btf"].get(n))
                                           for n in set(got["compiled"]) | set(got["btf"])
                                           if got["compiled"].get(n) != got["btf"].get(n)}
    assert len(got["compiled"]) >= 300, len(got["compiled"])


def test_the_probe_scripts_rendered_with_either_are_the_same(got):
    """So the stock image runs byte for byte the bpftrace programs the --btf image runs."""
    assert got["rendered_equal"] == ["txg", "vdev_cache", "vdev_queue", "zil"], got["rendered_equal"]
    assert got["rendered_layouts"][0].startswith("compiled")
