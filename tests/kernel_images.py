"""The kernel lab images the kernel tests run on, and their one fidelity guest each
(scripts/kernel-fidelity), shared by tests/test_kernel_fidelity.py and tests/test_kernel_layouts.py:
one boot per image per session."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import guest_run, kernel_lab_ready

CACHE_SIZE = 16 << 20
# the seed stories' runs (scripts/kernel-fidelity also has awq1/awq10: awqset's two halves show the same)
SEEDS = ("slog", "noslog", "awqset", "txgt5", "txgt1", "dirtyset")
# per image: the runs of its guest, and its module options (the vdev cache is 2.1's only). Within CI's
# budget: the tail run (the probes' END delivering open txgs) on the default image, the compiled
# layouts against module BTF on the newest (and bookworm's --btf image; 2.3.9's measured by hand,
# docs/fidelity.md), OpenZFS's zilstat side by side on 2.3.9
IMAGES = {
    "bookworm": (("fidelity", "tail"), ("-o", f"zfs_vdev_cache_size={CACHE_SIZE}")),
    "trixie": (("fidelity", "zilstat"), ()),
    "trixie-backports": (("layouts", "fidelity") + SEEDS, ()),
}
SEED_IMAGE = "trixie-backports"
# images with a run of their own, not the fidelity checks: sid's Oracle DTrace beside bpftrace
# (tests/test_kernel_dtrace.py)
OTHERS = {"sid": (("dtrace",), ())}


@dataclass
class Image:
    distro: str
    out: Path
    runs: tuple[str, ...]
    version: str       # the module's, as the guest's /sys/module/zfs/version says (2.3.9-1)

    def has_vdev_cache(self) -> bool:        # removed in OpenZFS 2.2.0
        return self.version.split(".")[:2] in (["2", "0"], ["2", "1"])

    @property
    def recorded(self) -> tuple[str, ...]:
        """The runs recorded with `zfsobs record` (zilstat is a side-by-side of two zilstats, layouts
        a compile)."""
        return tuple(r for r in self.runs if r not in ("zilstat", "layouts"))


_done: dict[str, Image] = {}


def fidelity_run(distro: str, tmp_path_factory) -> Image:
    """The image's fidelity run, once per session (the seed tests share the newest image's)."""
    why = kernel_lab_ready(distro=distro)
    if why:
        pytest.skip(why)
    if distro not in _done:
        runs, options = {**IMAGES, **OTHERS}[distro]
        env = "ZFSOBS_FIDELITY_DIR" + ("" if distro == "bookworm" else "_" + distro.upper().replace("-", "_"))
        out = guest_run(tmp_path_factory, env, "kernel-fidelity", runs, timeout=2400,
                        lab=("--workload", "none", "--distro", distro, *options))
        version = (out / Image(distro, out, runs, "").recorded[0] / "before" / "version").read_text().strip()
        _done[distro] = Image(distro, out, runs, version)
        write_reports(out)
    return _done[distro]


def write_reports(out: Path) -> None:
    """<run>.json beside each <run>.cap: `zfsobs report --format json` of it, made here on the host."""
    from zfsobs.capture import read_capture
    from zfsobs.views import report
    for cap in sorted(out.glob("*.cap")):
        path = cap.with_suffix(".json")
        if not path.exists():
            path.write_text(report.render(read_capture(str(cap)), "json"))
