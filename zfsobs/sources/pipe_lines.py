"""A tracer's output pipe as lines, read a pipeful at a time.

bpftrace and dtrace write a line at a time (line buffered), so a reader that blocks on each read
is woken for each line: a busy pool's vdev queue dumps are ~2,700 lines a second, and the wakeups
(a thread switch and the GIL each) cost the live view more than the lines did. After a read that
did not fill the buffer, the reader pauses PAUSE_S, so the next read takes what came meanwhile.
The pipe holds 64 KiB; at PAUSE_S that is ~3 MB/s, far above what any probe prints (the dumps
are ~30 KB a burst), so a tracer never waits on it."""
from __future__ import annotations

import os
import time
from typing import Iterator

PAUSE_S = 0.02          # added to a line's way to the screen at most; the view redraws each second
READ = 65536


def pipe_lines(stream, pause: float = PAUSE_S) -> Iterator[str]:
    """Each line of `stream` (a pipe's file object: read through its descriptor, never itself)
    without its newline; a last line without one too. Bytes that are not UTF-8 become U+FFFD."""
    fd, rest = stream.fileno(), b""
    while True:
        data = os.read(fd, READ)
        if not data:
            break
        full = len(data) == READ
        data = rest + data
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        if cut:
            yield from data[:cut - 1].decode("utf-8", "replace").split("\n")
        if not full:
            time.sleep(pause)
    if rest:
        yield rest.decode("utf-8", "replace")
