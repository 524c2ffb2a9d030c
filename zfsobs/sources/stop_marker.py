"""How zfsobs tells a bpftrace to stop without a signal that can be lost.

bpftrace 0.17 stops on SIGINT only when the signal interrupts its epoll_wait(): its poll loop
checks the flag the handler sets in that one branch, so a SIGINT that arrives while it is reading
events is ignored for good (bpftrace's src/bpftrace.cpp, poll_perf_events; seen in CI: a bpftrace
sat 300 s in epoll_wait after SIGINT). Instead each script carries one more probe, on libc's
getpgid() in this process with an argument no process can have as its id, that calls exit():
an event bpftrace reads like any other, then it runs END and exits. fire() makes that call.
"""
from __future__ import annotations

import os
import random

# Linux pids never reach PID_MAX_LIMIT (2^22 on 64-bit): getpgid() of a larger one is ESRCH,
# a syscall with no effect that only our probe notices.
_PID_MAX_LIMIT = 1 << 22


def libc_path() -> str:
    """The C library this process runs with (the probe must be on the very file)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split(None, 5)[-1].strip()
            if os.path.basename(path).startswith("libc.so"):
                return path
    return "libc"      # bpftrace looks the name up itself


class StopMarker:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.token = random.randrange(_PID_MAX_LIMIT + 1, 1 << 31)

    def probe(self, script: str = "") -> str:
        """The probe block to append to SCRIPT. One that keeps a @stopping map gets it set first: its
        probes still fire while bpftrace detaches them before END, and what they print then is lost
        (zil.bt leaves a txg's final flush to END once stopping)."""
        flag = "    @stopping = 1;\n" if "@stopping" in script else ""
        return (f"\nuprobe:{libc_path()}:getpgid /pid == {self.pid} && (arg0 & 0xffffffff) == {self.token}/\n"
                "{\n" + flag + "    exit();\n}\n")

    def fire(self) -> None:
        """Every bpftrace carrying probe() exits: END runs and prints, then the process ends."""
        try:
            os.getpgid(self.token)
        except OSError:
            pass
