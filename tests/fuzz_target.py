"""What the coverage-guided fuzzer (scripts/fuzz, atheris) feeds and exercises: an input is either a
capture file's bytes (first byte not "L") or, after "L", event lines that a real CaptureWriter makes
into a well-framed capture (so the parser and models see hostile lines, not only damaged framing).
Every reader of a capture runs on it; only ZfsobsError may escape."""
from __future__ import annotations

import io
import os
import tempfile

from zfsobs.capture import CaptureWriter, read_capture
from zfsobs.errors import ZfsobsError
from zfsobs.events import Parser


def capture_bytes(data: bytes) -> bytes:
    """The capture file an input stands for."""
    if data[:1] != b"L":
        return data[1:]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "lines.cap")
        w, parser = CaptureWriter(path, {"host": "fuzz"}, force=True), Parser()
        for i, line in enumerate(data[1:].decode("utf-8", "replace").splitlines()):
            w.add(line, parser.parse(line))
            if i % 7 == 6:
                w.flush(span_end=i % 14 == 13)
        w.close({})
        with open(path, "rb") as f:
            return f.read()


def exercise(path: str) -> None:
    """Every report format (text, JSON, each CSV section, OpenMetrics, compare's three) of the
    capture at path; a ZfsobsError (refused, or a bound hit) ends it."""
    from zfsobs.views import compare, report
    from zfsobs.views.openmetrics import export
    try:
        cap = read_capture(path)
        for fmt in ("text", "json"):
            report.write(cap, fmt, io.StringIO())
        for section in report.SECTIONS:
            report.write(cap, "csv", io.StringIO(), section)
        export(cap, io.BytesIO(), 15.0)
        for fmt in ("text", "json", "csv"):
            compare.render(cap, fmt)
    except ZfsobsError as exc:
        assert "\n" not in str(exc), str(exc)


def one_input(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "in.cap")
        with open(path, "wb") as f:
            f.write(capture_bytes(data))
        exercise(path)
