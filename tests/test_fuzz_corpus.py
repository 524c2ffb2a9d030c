"""The fixed fuzz corpus (tests/data/fuzz-corpus/: issue 41's reproducers and what scripts/fuzz
found), every file through every report format in a child bounded to 512 MiB of address space and
30 s: each ends readable (status 0) or in one `zfsobs: ...` line, never a traceback, a MemoryError
or a timeout, and its peak RSS stays under 200 MB."""
from __future__ import annotations

import glob
import os

import pytest

from fuzz_bounded import COMMANDS, RSS, run

CORPUS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "data", "fuzz-corpus", "*.cap")))
# 800k events, ~20 s a command on a busy machine: through the reader's two orders (report, compare) only
SLOW = {"6-equal-ts.cap": (COMMANDS[0], COMMANDS[5])}
CASES = [(path, args) for path in CORPUS for args in SLOW.get(os.path.basename(path), COMMANDS)]


@pytest.mark.parametrize("path, args", CASES, ids=[f"{os.path.basename(p)}-{'-'.join(a)}" for p, a in CASES])
def test_each_corpus_file_ends_bounded(path, args):
    verdict, detail, rss = run(args, path)
    assert verdict in ("ok", "refused"), f"{verdict}: {detail}"
    assert rss < RSS, f"peak RSS {rss >> 20} MiB"


def test_the_corpus_holds_every_reproducer():
    """A clean clone has the corpus (a file ignored by git would leave the test above with nothing)."""
    from fuzz_reproducers import REPRODUCERS
    names = {os.path.basename(p)[:-4] for p in CORPUS}
    assert set(REPRODUCERS) <= names, sorted(set(REPRODUCERS) - names)
