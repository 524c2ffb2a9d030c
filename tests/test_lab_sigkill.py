"""SIGKILL of zfsobs with the lab: within 5 s nothing of it runs on, no process (bpftrace, ztest,
the pass process ztest forked, the command after `--`, zfsobs's watchdog), and no lab directory
is left; each process has finished its exit soon after (a killed bpftrace's exit detaches its
uprobes, one RCU grace period each: 2-5 s for the default probes here).
The run also starts among hostile entries user nobody made where zfsobs sweeps stale
directories: names whose pid no process can have, and symlinks named like a stale directory of
ours pointing at a root-owned directory: it starts normally and leaves them all as they were."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from conftest import lab_ready

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ok")]

ZFSOBS = [sys.executable, "-m", "zfsobs"]
GONE_WITHIN_S = 5.0       # nothing runs on, the lab's directory is gone
REAPED_WITHIN_S = 60.0    # each process has also finished its exit (bpftrace's detaching its probes)


def as_nobody(*cmd: str) -> None:
    subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *cmd], check=True)


def children() -> dict[int, list[int]]:
    """ppid -> pids of the running processes (zombies left out: they are gone but for their reaping)."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
            except OSError:
                continue
            if state != "Z":
                out.setdefault(int(ppid), []).append(int(entry))
    return out


def descendants(pid: int) -> set[int]:
    tree, found, todo = children(), set(), [pid]
    while todo:
        for kid in tree.get(todo.pop(), []):
            found.add(kid)
            todo.append(kid)
    return found


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def running(pids: set[int]) -> dict[int, str]:
    """The processes of `pids` still running their program: not gone and not in their exit (a
    process in its exit has released its memory: no Vm lines in its status, no command line)."""
    out = {}
    for pid, cmdline in alive(pids).items():
        try:
            with open(f"/proc/{pid}/status") as f:
                if "\nVmSize:" in f.read():
                    out[pid] = cmdline
        except OSError:
            continue
    return out


def alive(pids: set[int]) -> dict[int, str]:
    running = {p for kids in children().values() for p in kids}
    return {p: comm(p) for p in pids if p in running}


@pytest.fixture
def hostile(tmp_path):
    """What nobody leaves in the roots zfsobs sweeps (the probes' /tmp, the lab's /dev/shm)."""
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "file").write_text("root's\n")
    dead = subprocess.Popen(["true"])
    dead.wait()
    tag = uuid.uuid4().hex[:8]
    links = [f"/tmp/zfsobs-probes-{dead.pid}-{tag}", f"/dev/shm/zfsobs-lab-{dead.pid}-{tag}"]
    dirs = [f"/tmp/zfsobs-probes-99999999999999999999-{tag}", f"/dev/shm/zfsobs-lab-99999999999999999999-{tag}"]
    for link in links:
        as_nobody("ln", "-s", str(precious), link)
    for d in dirs:
        as_nobody("mkdir", d)
    yield precious, links, dirs
    for link in links:
        os.unlink(link)
    for d in dirs:
        shutil.rmtree(d)


def drain(stream) -> None:
    threading.Thread(target=lambda: [None for _ in iter(lambda: stream.read(65536), b"")], daemon=True).start()


@pytest.mark.parametrize("mode", ["record", "top"])
def test_sigkill_leaves_no_process_and_no_lab_directory(mode, tmp_path, hostile):
    precious, links, dirs = hostile
    if mode == "record":      # with a command after --, which gets a parent-death signal too
        cmd = ZFSOBS + ["record", "--lab", "-O", str(tmp_path / "k.cap"), "--", "sleep", "1000"]
    else:                     # top piped into a reader, as `zfsobs top --lab | cat`
        cmd = ZFSOBS + ["top", "--lab"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    drain(proc.stdout)
    drain(proc.stderr)
    try:
        # running: the probes' bpftrace, the lab's ztest and its pass (and the command)
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, f"{mode} --lab ended with status {proc.returncode}"
            assert time.monotonic() < deadline, alive(descendants(proc.pid))
            ours = alive(descendants(proc.pid))
            ztests = [p for p, c in ours.items() if c.startswith("/usr/sbin/ztest")]
            if (len(ztests) >= 2 and any(c.startswith("bpftrace") or "/bpftrace " in c for c in ours.values())
                    and (mode == "top" or any(c == "sleep 1000" for c in ours.values()))):
                break
            time.sleep(0.5)
        lab_dir = next(os.path.dirname(c.split(" -f ")[1].split()[0]) for c in ours.values() if " -f " in c)
        assert os.path.isdir(lab_dir)
        proc.kill()
        proc.wait()
        killed = time.monotonic()
        while (left := running(set(ours))) or os.path.exists(lab_dir):
            if time.monotonic() - killed > GONE_WITHIN_S:
                break
            time.sleep(0.1)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for pid in alive(set(ours)):       # nothing to run on into other tests, whatever the outcome
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left and not os.path.exists(lab_dir), (took, left, lab_dir)
    # and then reaped: a bpftrace's exit detaches its uprobes, one RCU grace period each (~0.1 s)
    while (exiting := alive(set(ours))) and time.monotonic() - killed < REAPED_WITHIN_S:
        time.sleep(0.2)
    reaped = time.monotonic() - killed
    print(f"{mode}: {len(ours)} processes stopped and {lab_dir} gone {took:.2f} s after the SIGKILL, "
          f"all reaped after {reaped:.2f} s")
    assert not exiting, (reaped, exiting)
    # the hostile entries: not followed, not removed, and they did not stop the start
    assert (precious / "file").read_text() == "root's\n"
    assert all(os.path.islink(l) for l in links) and all(os.path.isdir(d) for d in dirs)
