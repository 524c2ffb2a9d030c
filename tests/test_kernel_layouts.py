"""Compiled struct layouts (zfsobs/targets/layouts.py) against the module's own BTF, for the same build: in a
kernel lab guest whose zfs.ko has module BTF, scripts/kernel-layouts compiles every probe name and
every member offset of the structs they read, and looks each up in /sys/kernel/btf/zfs. bookworm's
--btf image (zfs-dkms 2.1.11 built with module BTF; its source, zfs_config.h and kernel headers are
what the stock image has too) gets a guest of its own (~3 min under TCG, the compile, nothing cached,
~1 of it); trixie-backports' stock build has module BTF, so its fidelity guest runs it too
(tests/kernel_images.py; trixie's 2.3.9 gave the same, measured by hand: docs/fidelity.md). So a module of each release without BTF (RHEL's kmod, a stripped build)
would get these same layouts. On bookworm's stock image they drive every probe:
tests/test_kernel_fidelity.py."""
from __future__ import annotations

import json

import pytest

from kernel_images import fidelity_run, guest_out

pytestmark = [pytest.mark.kernel]


NEEDS = {"got": None}      # the guest each fixture waits for: its parameter (tests/kernel_images.py)


@pytest.fixture(scope="module", params=["bookworm-btf", "trixie-backports"])
def got(request):
    if request.param == "bookworm-btf":
        out = guest_out("bookworm-btf", request)         # scripts/kernel-layouts alone
    else:
        out = fidelity_run(request.param, request).out
    return json.loads((out / "layouts.json").read_text())


def test_every_probe_offset_compiled_equals_the_modules_btf(got):
    names = got["probe_names"]
    assert len(names) >= 24 and {"zio.io_vd", "vdev_queue.class_queued", "ZIO_FLAG_DONT_QUEUE"} <= set(names)
    compiled = {n: got["compiled"].get(n) for n in names}
    btf = {n: got["btf"].get(n) for n in names}
    # from 2.2 the ZIO_FLAG_* are macros, which BTF cannot hold (the kernel target compiles them even
    # with BTF), and the vdev cache's flag is gone
    macros, gone = (set(), set()) if got["version"].startswith("2.1.") else \
        ({"ZIO_FLAG_DONT_QUEUE"}, {"ZIO_FLAG_DONT_CACHE"})
    assert {n for n in names if btf[n] is None} == macros | gone, btf
    assert {n for n in names if compiled[n] is None} == gone, compiled
    assert all(compiled[n] == btf[n] for n in names if btf[n] is not None), \
        {n: (compiled[n], btf[n]) for n in names if compiled[n] != btf[n]}
    assert compiled.get("ZIO_FLAG_DONT_QUEUE") == (1 << 19 if got["version"].startswith("2.1.") else 1 << 20)
    # it was compiled here, with the module's own flags, against the running kernel's tree
    version = got["version"]
    assert got["how"].startswith("compiled in ") and got["inputs"]["src"] == f"/usr/src/zfs-{version}"
    assert got["inputs"]["config"].startswith(f"/var/lib/dkms/zfs/{version}/") and \
        got["inputs"]["build"].startswith("/lib/modules/")
    assert {"-D_KERNEL", "-UDEBUG", "-DNDEBUG"} <= set(got["flags"]) and any(f.startswith("-std=gnu") for f in got["flags"])


def test_every_member_of_the_structs_they_read_equals_the_modules_btf(got):
    """Not only the names the probes use: every named member offset and the size of zio, vdev,
    vdev_queue, zilog, lwb, itx, dsl_pool and dmu_tx, so a flag or config macro that moved anything shows."""
    assert got["structs"] == ["dmu_tx", "dsl_pool", "itx", "lwb", "vdev", "vdev_queue", "zilog", "zio"]
    differ = {n: (got["compiled"].get(n), got["btf"].get(n)) for n in set(got["compiled"]) | set(got["btf"])
              if got["compiled"].get(n) != got["btf"].get(n)}
    assert set(differ) <= {"ZIO_FLAG_DONT_QUEUE"} and all(b is None for _, b in differ.values()), differ
    assert len(got["compiled"]) >= 300, len(got["compiled"])


def test_the_probe_scripts_rendered_with_either_are_the_same(got):
    """So the stock image runs byte for byte the bpftrace programs the --btf image runs."""
    scripts = ["throttle", "txg", "vdev_cache", "vdev_queue", "zil"] if got["version"].startswith("2.1.") else \
        ["throttle", "txg", "vdev_queue", "zil"]       # no vdev cache from 2.2 on: that script is absent, says why
    assert got["rendered_equal"] == scripts, got["rendered_equal"]
    assert all("removed in OpenZFS 2.2.0" in why for why in got.get("absent", {}).values()), got.get("absent")
    assert got["rendered_layouts"][0].startswith("compiled")
