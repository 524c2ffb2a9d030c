"""A fidelity guest booted with many possible CPUs (tests/kernel_images.py POSSIBLE_CPUS) reports them.
That every default probe loads there, and every equality holds, is tests/test_kernel_fidelity.py's (its
first test: nothing unavailable but what the release lacks)."""
from __future__ import annotations

import pytest

from kernel_images import IMAGES, POSSIBLE_CPUS, Image, fidelity_run

pytestmark = [pytest.mark.kernel]
# the guest each fixture waits for (tests/kernel_images.py); none while no guest boots with many CPUs
NEEDS = {"image": None} if POSSIBLE_CPUS else {}


@pytest.fixture(scope="module", params=sorted(POSSIBLE_CPUS.keys() & IMAGES.keys()) or [None])
def image(request) -> Image:
    if request.param is None:
        pytest.skip("no fidelity guest boots with many possible CPUs (kernel_images.POSSIBLE_CPUS is empty)")
    return fidelity_run(request.param, request)


def test_the_guest_reports_the_possible_cpus_it_was_booted_with(image):
    assert (image.out / "possible").read_text().strip() == f"0-{POSSIBLE_CPUS[image.distro] - 1}"

