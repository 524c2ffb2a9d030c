"""The seek index (zfsobs/views/seek_index.py): a far seek that starts from one of its points reads
the same way to its cut as one that reads from the capture's start. On the real lab capture written
again with a digest every 3 records, at cuts every 0.7 s across it: the events the prefix
keeps, the ones it skips, what the digests stood for, the parser's counts, and the events after
the cut. The screens are tests/test_replay.py's."""
from __future__ import annotations

from conftest import recorded_capture
from test_capture_digest import rewrite
from zfsobs.capture import read_capture
from zfsobs.events import Parser
from zfsobs.views.far_seek import Prefix
from zfsobs.views.seek_index import SeekIndex

SEC = 10**9


def way_to(cap, cut: int, index: SeekIndex | None):
    """What a far seek to `cut` reads: (kept events, skipped, stood for, parser counts, the next 50
    events), and whether it started from a point of the index."""
    parser = Parser()
    stream = cap.events(parser, digests=True, before=cut)
    stream.peek = True
    prefix = index.start(stream, cut) if index else None
    started = prefix is not None
    prefix = prefix or Prefix()
    ev = next(stream, None)
    while ev is not None and ev.ts < cut:
        prefix.add(ev)
        ev = next(stream, None)
    stream.stop_peeking()
    after = ([stream.unpeek(ev)] if ev else []) + [e for _, e in zip(range(49), stream)]
    kept = [(e.kind, e.ts, getattr(e, "raw", None) or sorted(e.fields.items())) for e in prefix.kept()]
    counts = (parser.events, parser.malformed, parser.ignored, parser.unknown_kinds)
    return (kept, prefix.skipped(), stream.stood_for, counts, [(e.kind, e.ts, e.fields) for e in after]), started


def test_a_seek_from_an_index_point_reads_what_one_from_the_start_reads(tmp_path):
    path = tmp_path / "x.cap"
    rewrite(recorded_capture(), path, 40, 3)
    cap = read_capture(str(path))
    index = SeekIndex(cap)
    while index.step(0.01):             # in slices, as replay builds it
        pass
    assert index.done and len(index.points) >= 20
    first = min(p[0] for p in index.points)
    cuts = range(first - SEC, cap.last_ts() + SEC, 7 * SEC // 10)
    started = 0
    for cut in cuts:
        fresh = read_capture(str(path))
        plain, _ = way_to(fresh, cut, None)
        indexed, used = way_to(cap, cut, index)
        assert indexed == plain, (cut - first) / SEC
        started += used
    assert started >= len(cuts) // 2            # most cuts had a point to start from
