"""Fuzzing the capture reader and everything that reads a capture (hypothesis; scripts/fuzz runs a
coverage-guided one, atheris, and tests/test_fuzz_corpus.py replays what it and issue 41 found): damaged files,
foreign files, and well-framed records carrying hostile headers and event lines. Each case must end
in a readable capture (with warnings when damaged) whose report and compare render, or in one
ZfsobsError: never another exception (a damaged file is replayed too, its seek index built and far
seeks made). The base file holds the first lines of
tests/data/lab-2.1.11.cap, recorded from a real lab run (scripts/record-fixtures re-records it)."""
from __future__ import annotations

import io
import json
import os

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st   # noqa: E402

from conftest import recorded_capture                                  # noqa: E402
from zfsobs.capture import CaptureWriter, read_capture                 # noqa: E402
from zfsobs.errors import ZfsobsError                                  # noqa: E402
from zfsobs.events import Parser                                       # noqa: E402
from zfsobs.views import compare, report                               # noqa: E402
from zfsobs.views.openmetrics import export                            # noqa: E402

CASES = int(os.environ.get("ZFSOBS_FUZZ_CASES") or 600)    # per test: 1800 cases in all, about 35 s
# CI replays a fixed set (a landing never hangs on a fresh random find); runs elsewhere explore anew:
# ZFSOBS_FUZZ_CASES=30000 found a vq line of class 9 that crashed the report (now left out, counted)
FUZZ = settings(max_examples=CASES, deadline=None, derandomize=bool(os.environ.get("CI")),
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    real = read_capture(recorded_capture())
    path = tmp_path_factory.mktemp("fuzz") / "base.cap"
    w, parser = CaptureWriter(str(path), real.meta, force=True), Parser()
    for i, line in enumerate(real.lines[:400]):
        w.add(line, parser.parse(line))        # as the pipeline adds them: E, V and G records
        if i % 50 == 49:
            w.flush(span_end=i % 100 == 99)
    w.close(real.trailer or {})
    return path.read_bytes()


def survive(data: bytes, path, replayed: bool = False) -> None:
    """Read and render (and with `replayed`, replay it); only ZfsobsError may escape."""
    path.write_bytes(data)
    try:
        cap = read_capture(str(path))
    except ZfsobsError as exc:
        assert "\n" not in str(exc)
        return
    json.loads(report.render(cap, "json", "txgs"))
    report.render(cap, "text", "txgs")
    report.render(cap, "csv", "vdev_queue")
    try:
        export(cap, io.BytesIO())
    except ZfsobsError as exc:      # a bound (docs/capture.md, "Bounds")
        assert "\n" not in str(exc)
    json.loads(compare.render(cap, "json"))
    compare.render(cap, "csv")
    if replayed:
        replay_through(read_capture(str(path)))


def replay_through(cap) -> None:
    """Replay's seek index built, then far seeks to the end, the middle, the start and the end: the
    base file is 7 s, so the model's history is cut to 0.25 s and the seek distances with it."""
    from zfsobs.model import samples, vdev_cache, vdev_queue, zil
    from zfsobs.views import replay
    sec = 10**9
    with pytest.MonkeyPatch.context() as m:
        for module, name in ((samples, "KEEP_NS"), (vdev_queue, "KEEP_NS"), (vdev_cache, "KEEP_NS"),
                             (zil, "FLOW_KEEP_NS")):
            m.setattr(module, name, sec // 4)
        m.setattr("zfsobs.model.KEEP_NS", sec // 4)
        for name in ("zfsobs.views.replay.FAR_NS", "zfsobs.views.replay.BACK_NS", "zfsobs.model.RATE_WINDOW_NS",
                     "zfsobs.views.zil_panel.RATE_NS"):
            m.setattr(name, sec // 10)
        rp = replay.Replayer(cap)
        rp.index.build()
        for ts in (rp.end, rp.start + (rp.end - rp.start) // 2, rp.start, rp.end):
            rp.seek(ts)


@FUZZ
@given(data=st.data())
def test_damaged_files(base, tmp_path, data):
    kind = data.draw(st.sampled_from(["truncate", "flip", "overwrite", "insert", "foreign"]))
    blob = bytearray(base)
    if kind == "truncate":
        blob = blob[:data.draw(st.integers(0, len(blob)))]
    elif kind == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(blob) - 1))
            blob[i] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "overwrite":
        i = data.draw(st.integers(0, len(blob) - 1))
        junk = data.draw(st.binary(min_size=1, max_size=200))
        blob[i:i + len(junk)] = junk
    elif kind == "insert":
        i = data.draw(st.integers(0, len(blob)))
        blob[i:i] = data.draw(st.binary(min_size=1, max_size=200))
    else:
        keep = data.draw(st.integers(0, 16))
        blob = blob[:keep] + data.draw(st.binary(max_size=2000))
    survive(bytes(blob), tmp_path / "case.cap", replayed=True)


WORD = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters="="), min_size=1, max_size=12)
VALUE = st.one_of(st.integers(-2, 2), st.integers(-(1 << 70), 1 << 70), WORD)
KINDS = st.sampled_from(["txg", "zil", "zil_itx", "zil_lat", "vq", "vq_lat", "vq_vdev", "vc", "tunable",
                         "hello", "bye", "lost", "other"])
FIELDS = st.sampled_from(["pool", "pid", "txg", "start", "sync_ns", "interval_ns", "dirty", "cpu", "seg",
                          "final", "vd", "class", "kind", "act", "pend", "act_max", "act_ns", "pend_ns",
                          "max_active", "size", "reads", "fill_bytes", "miss_bytes", "name", "old", "new",
                          "since", "initial", "commits", "lat_ns", "b0", "b3", "count", "probe", "path"])


@st.composite
def event_line(draw):
    kind = draw(KINDS)
    ts = draw(st.integers(0, 1 << 64))
    fields = draw(st.dictionaries(FIELDS, VALUE, max_size=12))
    return " ".join(["zfsobs", "1", kind, str(ts)] + [f"{k}={v}" for k, v in fields.items()])


@FUZZ
@given(meta=st.dictionaries(st.text(max_size=10), st.recursive(
           st.none() | st.booleans() | st.integers() | st.text(max_size=20),
           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
           max_leaves=8), max_size=6),
       lines=st.lists(event_line(), max_size=40))
def test_hostile_headers_and_lines(tmp_path, meta, lines):
    path = tmp_path / "hostile.cap"
    w, parser = CaptureWriter(str(path), meta, force=True), Parser()
    for i, line in enumerate(lines):
        w.add(line, parser.parse(line))
        if i % 7 == 6:
            w.flush(span_end=i % 14 == 13)
    w.close({})
    survive(path.read_bytes(), path)
    try:
        cap = read_capture(str(path))
    except ZfsobsError:
        return
    # whatever the lines, a digest stands for its records exactly (zfsobs/capture/digest.py)
    assert report.as_dict(cap) == report.as_dict(cap, report.build(cap, samples=False, digests=False))


SMALL = st.integers(0, 4)


@st.composite
def counter_line(draw):
    """A queue or cache counter line as the probes print them, with the awkward cases drawn often:
    equal and out-of-order ts, vdevs freed (final=1) and their addresses used again, peaks anywhere."""
    kind = draw(st.sampled_from(["vq", "vq", "vq_lat", "vq_vdev", "vc", "txg"]))
    ts = draw(st.integers(0, 3))       # a step from the line before: made cumulative below
    f = {"pool": "p", "pid": draw(st.sampled_from([1, 2])), "vd": draw(st.sampled_from(["0xa", "0xb"]))}
    if kind == "vq":
        f.update({"class": draw(st.integers(0, 7)), "final": draw(st.integers(0, 1)), "pend": draw(SMALL),
                  "act": draw(SMALL), "pend_max": draw(SMALL), "act_max": draw(SMALL), "enq": draw(SMALL),
                  "done": draw(SMALL), "pend_ns": draw(SMALL), "act_ns": draw(SMALL),
                  "max_active": draw(SMALL)})
    elif kind == "vq_lat":
        f.update({"class": draw(st.integers(0, 6)), "kind": draw(st.integers(0, 1)), "b0": draw(SMALL),
                  "b3": draw(SMALL)})
    elif kind == "vq_vdev":
        f.update({"guid": draw(SMALL), "final": draw(st.integers(0, 1)), "path": draw(st.sampled_from(["/d/a", "/d/b"]))})
    elif kind == "vc":
        f.update({"final": draw(st.integers(0, 1)), "reads": draw(SMALL), "hits": draw(SMALL),
                  "misses": draw(SMALL), "size": draw(SMALL), "max": 16384, "bshift": 16, "path": "/d/a"})
    else:
        f = {"pool": "p", "pid": 1, "txg": draw(st.integers(1, 5)), "start": ts - 1, "sync_ns": 1, "dirty": 1}
    return " ".join(["zfsobs", "1", kind, str(ts)] + [f"{k}={v}" for k, v in f.items()])


def in_time(lines: list[str], back: list[int]) -> list[str]:
    """Each line's ts step added up; the lines at `back` go 3 back instead (out of order)."""
    out, ts = [], 100
    for i, line in enumerate(lines):
        head, step, rest = line.split(" ", 4)[:3], int(line.split(" ", 4)[3]), line.split(" ", 4)[4]
        ts += -3 if i in back else step
        out.append(" ".join(head + [str(ts), rest]))
    return out


@FUZZ
@given(lines=st.lists(counter_line(), max_size=120), back=st.lists(st.integers(0, 119), max_size=2),
       record=st.integers(1, 9), span=st.integers(1, 6))
def test_a_report_from_digests_equals_one_from_every_line(tmp_path, lines, back, record, span):
    """The digest's claim (zfsobs/capture/digest.py): whatever the ties, vdev frees and the odd
    line out of time order, a report that reads the digests instead of the V records they cover is
    the same report."""
    lines = in_time(lines, back)
    path = tmp_path / "counters.cap"
    w, parser = CaptureWriter(str(path), {}, force=True), Parser()
    for i, line in enumerate(lines):
        w.add(line, parser.parse(line))
        if i % record == record - 1:
            w.flush(span_end=(i // record) % span == span - 1)
    w.close({})
    cap = read_capture(str(path))
    assert report.as_dict(cap) == report.as_dict(cap, report.build(cap, samples=False, digests=False))
