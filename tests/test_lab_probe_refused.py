"""A probe the bpftrace in use refuses (its parser, semantic checks or the kernel's verifier: what a
newer or older bpftrace can do to one script) leaves the run as an unavailable metric with
bpftrace's reason, and the others run; the txg probe, the backbone, stays a one-line error.
Real bpftrace on the real library: the refused script is a rendered probe with one statement no
bpftrace accepts."""
from __future__ import annotations

import dataclasses
import time

import pytest

from conftest import lab_ready
from zfsobs.errors import ZfsobsError
from zfsobs.sources.bpftrace import BpftraceSource
from zfsobs.targets.target import libzpool

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ok")]

REFUSED = "\nBEGIN { $x = 1; $x = \"a string\"; }\n"     # a type change: every version rejects it


def attached_source(refuse: str) -> BpftraceSource:
    src = BpftraceSource(libzpool(), probes=("txg", "zil", "vdev_cache"))
    src.rendered = [dataclasses.replace(r, text=r.text + REFUSED) if r.name == refuse else r
                    for r in src.rendered]
    src.start()
    deadline = time.monotonic() + 120
    try:
        while not src.attached:
            assert time.monotonic() < deadline, "probes did not attach"
            src.poll(0.2)
    except BaseException:
        src.close()
        raise
    return src


def test_a_refused_probe_is_dropped_with_its_reason_and_the_others_run():
    src = attached_source("vdev_cache")
    try:
        assert set(src.unavailable) == {"vdev_cache"}
        why = src.unavailable["vdev_cache"]
        assert why.startswith("bpftrace could not start probe 'vdev_cache'") and "Type mismatch for $x" in why, why
        assert src.meta["unavailable"]["vdev_cache"] == why and "vdev_cache" not in src.meta["probes"]
        assert set(src.pids) == {"txg", "zil"} and all(src.pids.values())
        assert not src.ended
    finally:
        src.close()


def test_a_refused_txg_probe_is_one_clear_error():
    with pytest.raises(ZfsobsError, match="could not start probe 'txg'"):
        attached_source("txg").close()
