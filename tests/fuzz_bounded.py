"""Runs a zfsobs command on a capture in a child with its address space and time bounded (RLIMIT_AS,
a wall-clock timeout), and says how it ended: the fuzz corpus's replay (tests/test_fuzz_corpus.py)
and scripts/fuzz judge every input by it."""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import time

MEMORY = 512 << 20          # bytes of address space per run
RSS = 200 << 20             # peak resident bytes per run (a report's own need is under 100 MB)
SECONDS = 30                # wall clock per run: generous on a busy 2-core machine
# every way a report reads a capture (the fuzz harness's targets)
COMMANDS = (("report",), ("report", "--format", "json"), ("report", "--format", "csv"),
            ("report", "--format", "csv", "--section", "vdev_queue"), ("report", "--format", "openmetrics"),
            ("report", "--compare"), ("report", "--compare", "--format", "json"))


def _limit(memory: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def run(args: tuple, path: str, memory: int = MEMORY, seconds: float = SECONDS) -> tuple[str, str, int]:
    """(verdict, detail, peak RSS bytes): "ok" (exit 0), "refused" (one `zfsobs: ` line, status 2),
    or a failure: "timeout", "memory" (MemoryError or killed), "crash" (anything else: a traceback,
    status 70)."""
    cmd = [sys.executable, "-m", "zfsobs", *args, path]
    with tempfile.TemporaryFile() as err_file:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err_file, preexec_fn=_limit(memory),
                             env=dict(os.environ, PYTHONHASHSEED="0"))
        deadline = time.monotonic() + seconds
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.kill(p.pid, signal.SIGKILL)
                os.wait4(p.pid, 0)
                p.returncode = -9
                return "timeout", f"over {seconds} s", 0
            time.sleep(0.05)
        p.returncode = os.waitstatus_to_exitcode(status)
        rss = usage.ru_maxrss * 1024
        err_file.seek(0)
        err = err_file.read().decode(errors="replace")
    lines = [line for line in err.splitlines() if line and not line.startswith("zfsobs: warning: ")]
    if "MemoryError" in err or p.returncode < 0:
        return "memory", f"status {p.returncode}: {err[-300:]}", rss
    if p.returncode == 0:
        return "ok", "", rss
    if p.returncode == 2 and len(lines) == 1 and lines[0].startswith("zfsobs: "):
        return "refused", lines[0], rss
    return "crash", f"status {p.returncode}: {err[-600:]}", rss
