"""zfsobs/sources/pipe_lines.py on a real pipe: every line, in order and whole, however the writer
cut its writes (a line at a time as bpftrace does, a line split across writes, one longer than a
read, a burst larger than the pipe), bytes that are not UTF-8, and a last line without a newline."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

from zfsobs.sources.pipe_lines import READ, pipe_lines


def read_all(chunks: list[bytes]) -> list[str]:
    r, w = os.pipe()

    def write():
        with os.fdopen(w, "wb", buffering=0) as f:
            for chunk in chunks:
                f.write(chunk)

    writer = threading.Thread(target=write)
    writer.start()
    with os.fdopen(r, "rb") as stream:
        got = list(pipe_lines(stream, pause=0.001))
    writer.join()
    return got


def test_lines_cut_anywhere_come_out_whole_and_in_order():
    lines = [f"zfsobs 1 txg {i} pool=p txg={i}" for i in range(2000)]
    text = "".join(line + "\n" for line in lines).encode()
    assert read_all([text[i:i + 7] for i in range(0, len(text), 7)]) == lines      # a write per 7 bytes
    assert read_all([(line + "\n").encode() for line in lines]) == lines           # a write per line
    assert read_all([text * 40]) == lines * 40                                      # ~2.5 MB at once


def test_a_line_longer_than_a_read_an_empty_line_bad_bytes_and_no_last_newline():
    long = "x" * (3 * READ + 5)
    got = read_all([b"a\n\n", long.encode() + b"\n", b"caf\xc3", b"\xa9 \xff end\n", b"tail"])
    assert got == ["a", "", long, "caf\u00e9 \ufffd end", "tail"]


def test_a_child_process_pipe_to_its_end():
    code = "import sys\nfor i in range(100): print(i, flush=True)\nsys.stdout.write('last')"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert list(pipe_lines(proc.stdout)) == [str(i) for i in range(100)] + ["last"]
    assert proc.wait() == 0
