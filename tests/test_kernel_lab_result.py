"""What the kernel lab says when its guest ends without the command's exit status (no guest is
booted: the run's console goes through the same reader a guest's does): whether the command had
started, the guest kernel's panic line, and the whole console kept in a private directory."""
from __future__ import annotations

import os
import subprocess

import pytest

from zfsobs.errors import ZfsobsError
from zfsobs.labs.kernel import KernelLab

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the kernel lab runs as root")

BOOT = [b"[    0.000000] Linux version 6.12.48+deb13-amd64", b"zfsobs-agent: [6.1s] up"]
RAN = [b"zfsobs-agent: [11.4s] running"]
# the shape of the panic seen under TCG (issue 42): the oops begins ~60 lines before its last line
PANIC = ([b"[  191.2] BUG: kernel NULL pointer dereference, address: 0000000000000008",
          b"[  191.2] RIP: 0010:sched_clock_cpu+0x1a/0x1c0"]
         + [b"[  191.2]  ? frame_%d+0x10/0x20" % i for i in range(60)]
         + [b"[  191.3] Kernel panic - not syncing: Fatal exception in interrupt"])


def result(tmp_path, monkeypatch, lines: list[bytes]) -> tuple[str, bytes]:
    monkeypatch.setenv("ZFSOBS_KLAB_TMP", str(tmp_path))
    monkeypatch.setenv("ZFSOBS_KLAB_CACHE", str(tmp_path / "cache"))
    lab = KernelLab(["zfsobs", "top"], layout="single", disk_size="128M")
    try:
        lab._prepare(tmp_path / "img")
        console = b"".join(line + b"\r\n" for line in lines)
        for i in range(0, len(console), 37):       # reads end mid-line
            lab._console(console[i:i + 37])
        lab.qemu = subprocess.Popen(["sh", "-c", "exit 1"])
        lab.qemu.wait()
        with pytest.raises(ZfsobsError) as exc:
            lab._result()
    finally:
        lab.stop()
    kept = str(exc.value).rpartition("; whole console: ")[2]
    assert kept.startswith(str(tmp_path / "cache" / "consoles") + "/"), exc.value
    assert oct(os.stat(os.path.dirname(kept)).st_mode & 0o777) == "0o700"
    with open(kept, "rb") as f:
        return str(exc.value), f.read()


def test_a_guest_that_died_under_the_command_says_so_and_keeps_the_whole_console(tmp_path, monkeypatch, capfd):
    lines = BOOT + RAN + PANIC
    message, console = result(tmp_path, monkeypatch, lines)
    assert "the command ran, but the guest ended before it exited" in message, message
    assert "the guest kernel failed: BUG: kernel NULL pointer dereference" in message, message
    assert console == b"".join(line + b"\r\n" for line in lines)       # the oops's start too
    assert "Kernel panic - not syncing" in capfd.readouterr().err       # the tail, on stderr


def test_a_guest_that_never_ran_the_command_says_that(tmp_path, monkeypatch):
    message, console = result(tmp_path, monkeypatch, BOOT)
    assert "the guest ended without running the command (qemu rc 1;" in message, message
    assert console.endswith(b"up\r\n")
