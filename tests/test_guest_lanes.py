"""The kernel tier's guest lanes (tests/kernel_images.py Lanes), with jobs that only sleep: a lane
opened later takes from the same queue, a job that runs alone has no other beside it, and one
queued late still runs."""
from __future__ import annotations

import time
from concurrent.futures import Future

from kernel_images import Lanes


def _jobs(lanes: Lanes, spec) -> dict[str, Future]:
    futures = {}
    for key, alone, seconds in spec:
        futures[key] = Future()
        lanes.add(key, alone, futures[key], lambda key=key, s=seconds: (time.sleep(s), key)[1])
    return futures


def _overlap(times, a: str, b: str) -> bool:
    return times[a][0] < times[b][1] and times[b][0] < times[a][1]


def test_one_lane_then_two_and_the_alone_ones_have_none_beside_them():
    lanes = Lanes()
    futures = _jobs(lanes, [("sid", True, 0.3), ("top", True, 0.2), ("bookworm", False, 0.6),
                            ("trixie", False, 0.5), ("btf", False, 0.2), ("command", False, 0.1)])
    lanes.open(1)
    time.sleep(0.1)
    lanes.open(2)           # sid is running: the second lane waits for it, and for top
    assert [futures[k].result(timeout=10) for k in futures] == list(futures)
    times = lanes.times
    others = set(times) - {"sid", "top"}
    assert not any(_overlap(times, alone, k) for alone in ("sid", "top") for k in set(times) - {alone})
    assert _overlap(times, "bookworm", "trixie"), times       # two lanes once opened
    assert times["sid"][1] <= times["top"][0] and all(times["top"][1] <= times[k][0] for k in others)
    assert max(sum(1 for k in times if times[k][0] <= t < times[k][1]) for t, _ in times.values()) <= 2
    late = _jobs(lanes, [("late", False, 0.05)])
    assert late["late"].result(timeout=10) == "late"


def test_a_job_that_fails_fails_its_future_and_the_lane_goes_on():
    lanes = Lanes()
    bad, good = Future(), Future()
    lanes.add("bad", False, bad, lambda: 1 / 0)
    lanes.add("good", False, good, lambda: "ok")
    lanes.open(1)
    assert isinstance(bad.exception(timeout=10), ZeroDivisionError) and good.result(timeout=10) == "ok"
