"""The text report: quantiles that are a latency histogram's bucket upper bound (the ZIL's commit latency p50/p99,
the vdev queue's wait and device p99) are marked ≤, as the live view marks them; its pool column fits the longest name."""
from __future__ import annotations

import json
import os

from conftest import DATA
from zfsobs.capture import read_capture
from zfsobs.views import report
from zfsobs.views.units import ms


def test_text_report_marks_bucket_bound_quantiles_as_on_screen():
    cap = read_capture(os.path.join(DATA, "lab-2.1.11.cap"))
    data = json.loads(report.render(cap, "json"))
    text = report.render(cap, "text")
    for pool, st in data["summary"]["zil"].items():
        zil = text.split("\nZIL ", 1)[1].split("\n\n", 1)[0]
        row = next(line for line in zil.splitlines() if line.startswith(pool))
        assert (f"{ms(st['lat_mean_ns'], 3)}/≤{ms(st['lat_p50_ns'], 3)}/≤{ms(st['lat_p99_ns'], 3)}/"
                f"{ms(st['lat_max_ns'], 3)}") in row, row
    rows = [line for line in text.splitlines() if " async_write " in line]
    assert rows
    for pool, classes in data["summary"]["vdev_queue"].items():
        st = classes["async_write"]
        row = next(r for r in rows if r.startswith(pool))
        assert f"/≤{ms(st['wait_p99_ns'], 3)}" in row and f"/≤{ms(st['dev_p99_ns'], 3)}" in row, row


def test_text_report_columns_fit_a_long_pool_name():
    """A pool name longer than the pool column widens it: each table's header and its rows shift by
    the same amount, so the numbers stay under their headers."""
    cap = read_capture(os.path.join(DATA, "lab-2.1.11.cap"))
    data = json.loads(report.render(cap, "json"))
    pool = next(iter(data["summary"]["txg"]))
    long = "tank_" + "x" * 40

    def renamed(d):
        if isinstance(d, dict):
            return {(long if k == pool else k): renamed(v) for k, v in d.items()}
        return [renamed(v) for v in d] if isinstance(d, list) else d
    short = report._text(data).splitlines()
    wide = report._text(dict(data, summary=renamed(data["summary"]))).splitlines()
    assert len(short) == len(wide)
    heads = ("txg sync", "ZIL ", "vdev queue ", "write throttle", "pool ")
    shift, rows = None, 0
    for a, b in zip(short, wide):
        if a.startswith(heads):
            shift = len(b) - len(a)       # the header's pool column grew by this much
            assert shift > 0, (a, b)
        elif a.startswith(pool + " "):
            rest = a[len(pool):].lstrip()
            assert b.startswith(long + " ") and b.endswith(rest), (a, b)
            assert b.index(rest, len(long)) - a.index(rest, len(pool)) == shift, (a, b)
            rows += 1
    assert rows >= 5


def test_line_mode_columns_fit_a_long_pool_name():
    """Line mode widens its pool column to the longest name it has printed and prints the header
    again over the wider columns: every row's numbers end where its header's names end."""
    import io
    from zfsobs.events import Event
    from zfsobs.views.lines import TxgLines
    out = io.StringIO()
    lines = TxgLines({}, out)
    for pool in ("tank", "tank_with_a_long_pool_name_of_many_characters", "tank"):
        lines(Event("txg", 0, {"pool": pool, "txg": 12345, "sync_ns": 1_500_000, "start": None}))
    text = out.getvalue().splitlines()
    assert [t.split()[0] for t in text] == ["time", "-", "time", "-", "-"], text
    for header, row in ((text[0], text[1]), (text[2], text[3]), (text[2], text[4])):
        # the txg column (right-aligned) ends where its header word does
        assert row.index("12345") + 5 == header.index("txg") + 3, (header, row)


def test_zilstat_txg_lines_fit_a_long_pool_name():
    """zilstat's txg mode widens its pool column the same way: the header comes again, and the
    numbers after a long name stay under their names."""
    import io
    from collections import Counter
    from zfsobs.model import Model
    from zfsobs.views.zilstat import Zilstat
    out = io.StringIO()
    zs = Zilstat(Model(), {}, None, None, out=out)
    for pool in ("tank", "tank_with_a_long_pool_name_of_many_characters", "tank"):
        zs._emit(["12345", pool], 4096, 8192, 1.0, 0, 0, Counter(lwbs=3))
    text = out.getvalue().splitlines()
    assert [t.split()[0] for t in text] == ["txg", "12345", "txg", "12345", "12345"], text
    for header, row in ((text[0], text[1]), (text[2], text[3]), (text[2], text[4])):
        # N-Bytes (right-aligned) ends where its header name does
        assert row.index(" 4096 ") + 5 == header.index("N-Bytes ") + 7, (header, row)


def test_vqstat_names_fit_a_long_pool_name(capture_path):
    """vqstat's pool/vdev column widens to the longest name instead of cutting it, header included:
    the columns after a long name stay under their names."""
    import io
    from zfsobs.events import Parser, parse_all
    from zfsobs.model import Model
    from zfsobs.views.vqstat import Vqstat
    model = Model(keep=None)
    for ev in parse_all(read_capture(capture_path).lines, Parser()):
        model.feed(ev)
    long = "tank_with_a_long_pool_name_of_many_characters"
    for v in model.vq.vdevs.values():
        v.pool = long
    out = io.StringIO()
    vq = Vqstat(model, {}, 1.0, None, out=out)
    s = max(model.vq.series.values(), key=lambda s: s.last.values["enq"])
    end = s.lines[len(s.lines) // 2].ts
    vq.interval(end - 10**9, end)
    text = out.getvalue().splitlines()
    row = next(t for t in text if t.startswith(long + " "))
    # the first pend column (right-aligned, 6 wide) ends where the header's "pend" does
    assert len(row) == len(text[1]), (text[1], row)
    assert text[1].index("pend") + 4 == len(long) + 1 + 6, text
