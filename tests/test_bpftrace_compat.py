"""What zfsobs does differently for bpftrace releases, without running one (the lab tests run the
real 0.17, 0.23 and 0.27: tests/test_lab_bpftrace_versions.py)."""
from __future__ import annotations

import os
import signal
import time

import pytest

from zfsobs.doctor import report as doctor
from zfsobs.sources import bpftrace as source, bpftrace_binary as binary
from zfsobs.sources.bpftrace_child import bpftrace_env
from zfsobs.events import Parser
from zfsobs.targets.target import find_libraries, libzpool


def test_the_environment_covers_every_release():
    env = bpftrace_env(4096)
    # 0.17-0.23 read MAP_KEYS_MAX, 0.20+ MAX_MAP_KEYS (0.24+ only that one)
    assert env["BPFTRACE_MAP_KEYS_MAX"] == env["BPFTRACE_MAX_MAP_KEYS"] == "4096"
    assert env["BPFTRACE_STR_TRUNC_TRAILER"] == ""


def test_doctor_names_the_tested_releases():
    assert doctor.tested("v0.17.0") and doctor.tested("v0.23.2") and doctor.tested("0.27.1")
    assert doctor.tested("v0.20.2") == "" and doctor.tested("unknown") == ""


def test_zfsobs_bpftrace_names_the_binary(monkeypatch, tmp_path):
    fake = tmp_path / "my-bpftrace"
    fake.write_text("#!/bin/sh\necho bpftrace v0.27.1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("ZFSOBS_BPFTRACE", str(fake))
    assert binary.bpftrace_path() == str(fake)
    monkeypatch.setenv("ZFSOBS_BPFTRACE", str(tmp_path / "gone"))
    assert binary.bpftrace_path() is None


def test_a_version_that_does_not_come_at_once_is_asked_again(tmp_path):
    """The version picks workarounds: one empty answer (a chroot wrapper on a busy machine) is asked
    again, not kept as "unknown"."""
    fake = tmp_path / "bpftrace"
    fake.write_text(f"#!/bin/sh\n[ -e {tmp_path}/asked ] && echo bpftrace v0.23.2; touch {tmp_path}/asked\n")
    fake.chmod(0o755)
    assert binary.bpftrace_version(str(fake)) == "v0.23.2"
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\n")
    silent.chmod(0o755)
    assert binary.bpftrace_version(str(silent)) == "unknown"


FAKE_HEAD = "#!/bin/sh\n[ \"$1\" = --version ] && { echo bpftrace v0.27.1; exit 0; }\n"
needs_lab = pytest.mark.skipif(os.geteuid() != 0 or not find_libraries(), reason="needs root and a libzpool")


def fake_run(monkeypatch, tmp_path, body: str, until: str):
    """A fake bpftrace that runs `body` (sh) as the txg probe: (the source, its lines up to the first
    holding `until`)."""
    fake = tmp_path / "bpftrace"
    fake.write_text(FAKE_HEAD + body + "exec sleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("ZFSOBS_BPFTRACE", str(fake))
    src = source.BpftraceSource(libzpool(), probes=("txg",)).start()
    try:
        lines, deadline = [], time.time() + 10
        while not any(until in line for line in lines) and time.time() < deadline:
            lines += src.poll(0.2)
    finally:
        for pid in src.pids.values():       # the fake has no stop probe
            os.killpg(pid, signal.SIGKILL)
        src.close()
    return src, lines


@needs_lab
def test_lost_events_on_stderr_are_counted(monkeypatch, tmp_path):
    """bpftrace 0.24+ says "Lost N events" (and "Attached N probes") on stderr, not stdout."""
    src, lines = fake_run(monkeypatch, tmp_path, "echo 'Attached 9 probes' >&2\n"
                          "echo 'zfsobs 1 hello 5 probe=txg target=libzpool'\necho 'Lost 7 events' >&2\n", " lost ")
    events = [ev for ev in map(Parser().parse, lines) if ev]
    assert [ev.fields for ev in events if ev.kind == "lost"] == [{"count": 7, "probe": "txg"}]
    assert src._stderr["txg"] == []


@needs_lab
def test_a_byte_that_is_not_utf8_costs_only_itself(monkeypatch, tmp_path):
    """A vdev path or pool name is bytes to the kernel: one that is not UTF-8 once ended the
    probe's reader thread (UnicodeDecodeError), and every line after it was never read."""
    _, lines = fake_run(monkeypatch, tmp_path, "echo 'zfsobs 1 hello 5 probe=txg target=libzpool'\n"
                        "printf 'zfsobs 1 vq_id 6 pool=p path=/dev/d\\377\\n'\n"
                        "echo 'zfsobs 1 txg 7 pool=p pid=1 txg=9 start=1 sync_ns=2'\n", " txg 7 ")
    assert "zfsobs 1 vq_id 6 pool=p path=/dev/d\ufffd" in lines and any(" txg 7 " in line for line in lines), lines


def test_no_kprobe_pair_becomes_a_session_program():
    """bpftrace 0.26+ merges an exact kprobe:X/kretprobe:X pair into one kprobe session program
    (bpftrace#5176): both bodies on one 512-byte stack, too much for zil's and throttle's spa_sync on
    sid's 0.27.1. On the kernel, from 0.23 (which has the flag), kprobe_multi is turned off, so no pair
    is eligible; uprobes and older releases run as before."""
    from zfsobs.sources.bpftrace_binary import run_flags
    off = ["--no-warnings", "--no-feature", "kprobe_multi"]
    assert run_flags("v0.27.1", kernel=True) == run_flags("v0.23.2", kernel=True) == off
    assert run_flags("v0.17.0", kernel=True) == run_flags("v0.27.1", kernel=False) == ["--no-warnings"]
    assert run_flags("unknown", kernel=True) == ["--no-warnings"]
