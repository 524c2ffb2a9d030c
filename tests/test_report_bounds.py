"""Quantiles that are a latency histogram's bucket upper bound (the ZIL's commit latency p50/p99,
the vdev queue's wait and device p99) are marked ≤ in the text report, as the live view marks them."""
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
