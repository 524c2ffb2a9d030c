"""zfsobs/sources/vq_dumps.py on the vdev queue probe's own output, recorded from a real run (bpftrace on
libzpool 2.1.11 beside the lab's ztest, in a pass that exported and re-imported its pool, so vdev_t
addresses were freed and allocated again in one process). Re-record: ./scripts/record-fixtures."""
from __future__ import annotations

import glob
import gzip
import os
import re
from collections import defaultdict

import pytest

from conftest import DATA
from zfsobs.sources import vq_dumps
from zfsobs import fields
from zfsobs.events import EventLine, Parser, event_line, format_line, key_values

FREE = "zfsobs 1 vq_free "


def made(lines) -> tuple[list[str], int]:
    """The lines VqDumps makes of the probe's, and how many of them came before the flush."""
    dumps, out = vq_dumps.VqDumps(), []
    for line in lines:
        out += dumps.feed(line)
    return out + dumps.flush(), len(out)


def totals(lines):
    """Completions per (pid, vd, class), summed over incarnations; final lines made while the dumps
    were fed (an incarnation ended by its free or by a newer one at its address) and at the flush."""
    out, fed = made(lines)
    done, prev, finals, parser = defaultdict(int), {}, [0, 0], Parser()
    for i, line in enumerate(out):      # in the order made (parse_all would sort by time)
        ev = parser.parse(line)
        if ev is None or ev.kind != "vq":
            continue
        key = (ev.get("pid"), ev.get("vd"), ev.get("class"))
        done[key] += ev.get("done") - prev.get(key, 0)
        prev[key] = ev.get("done")
        if ev.get("final"):
            del prev[key]
            finals[i >= fed] += 1
    return done, finals


@pytest.fixture(scope="module")
def raw():
    paths = sorted(glob.glob(os.path.join(DATA, "vq-raw-*.txt.gz")))
    assert paths, "no recorded vdev queue probe output in tests/data (./scripts/record-fixtures)"
    with gzip.open(paths[-1], "rt") as f:
        return f.read().splitlines()


def test_a_lost_vq_free_line_costs_no_counts(raw):
    """Fed as it came and again without its vq_free lines: a vdev_t allocated again at a freed one's
    address proves the free (the key's incarnation number went up), so every incarnation's counts
    still come out, and the older one ends with final=1 before the stop, not at it."""
    frees = [line for line in raw if line.startswith(FREE)]
    again = {tuple(line.split()[4:6]) for line in frees if not line.endswith(" gen=0")}
    assert len(again) >= 10, f"only {len(again)} addresses allocated again: re-record (./scripts/record-fixtures)"
    whole, (fed, _) = totals(raw)
    without, (fed_without, _) = totals([line for line in raw if not line.startswith(FREE)])
    assert sum(whole.values()) > 10000 and without == whole
    # without vq_free lines only a newer incarnation can end an older one before the stop
    assert 0 < fed_without <= fed, f"{fed_without} final lines before the stop without vq_free, {fed} with"


def test_probe_runs_that_may_have_missed_their_dump_are_lost_events():
    """The probe counts its runs of 400 ms or more (a stalled CPU: such a run can write into a set
    already printed) in each dump's late=; each rise is a lost event, as bpftrace's own losses are."""
    dumps, parser, lost = vq_dumps.VqDumps(), Parser(), []
    for i, late in enumerate((0, 2, 2, 3)):
        for line in (f"zfsobs 1 vq_dump {1000 + i} set={i} end={900 + i} late={late}", f"zfsobs 1 vq_dump_end {1001 + i}"):
            lost += [ev for ev in map(parser.parse, dumps.feed(line)) if ev and ev.kind == "lost"]
    assert [(ev.ts, ev.get("count"), ev.get("probe")) for ev in lost] == [(1001, 2, "vdev_queue"), (1003, 1, "vdev_queue")]
    # a dump without the field (a probe before it) reads as none
    assert dumps.feed("zfsobs 1 vq_dump 2000 set=0 end=1900") == []


def test_a_changed_limit_reaches_the_lines_of_its_time():
    """A set is printed 450 ms after the probes left it, and the limits with it, read by then: each
    dump's reading is newer than its lines. Every reading waits for the lines of its time, in order;
    none is put on lines from before it, and a newer dump's reading does not hold it back (the lab's
    tuning test once saw max_active stay 3 for 9 s after a change to 1)."""
    dumps, parser, seen = vq_dumps.VqDumps(), Parser(), []
    change = 5_000_000_000      # the limit goes from 3 to 1 here
    for i in range(40):
        printed = 1_000_000_000 + i * 250_000_000
        end, read = printed - 450_000_000, printed - 1_000_000
        limit = 3 if read < change else 1
        lines = [f"zfsobs 1 vq_dump {printed} set={i % 6} end={end} late=0",
                 f"@vq_n{i % 6}[7, 4096, 3, 0]: 1",
                 f"@vq_lma[7, 3]: {limit}", f"@vq_lmi[7, 3]: 1", f"@vq_lt[7]: {read}",
                 f"zfsobs 1 vq_dump_end {printed}"]
        for line in lines:
            seen += [(ev.ts, ev.get("max_active")) for ev in map(parser.parse, dumps.feed(line)) if ev and ev.kind == "vq"]
    assert len(seen) >= 15
    assert all(limit == 3 for ts, limit in seen if ts < change)
    # each line carries the newest reading at or before its time: 1 from the first dump read after
    # the change (read 1 ms before printing), whose lines' time comes 449 ms after that
    assert all(limit == 1 for ts, limit in seen if ts >= change + 500_000_000)


def test_a_dump_read_in_one_pass_gives_the_lines_of_one_read_an_entry_at_a_time(raw, monkeypatch):
    """The counts and maxima of a dump are read with one regex at its end; a dump with any entry
    not of that form is read an entry at a time. Both give the same lines, on the recorded output."""
    fast, _ = made(raw)
    monkeypatch.setattr(vq_dumps, "_COUNTS", re.compile(r"(?!)"))      # matches nothing: every dump falls back
    slow, _ = made(raw)
    assert len(fast) > 1000 and sum(line.startswith("zfsobs 1 vq_lat ") for line in fast) > 500
    assert fast == slow
    # the vq_lat lines, made from a template, are format_line's text of their own fields
    lat = next(line for line in fast if line.startswith("zfsobs 1 vq_lat "))
    ev = Parser().parse(lat)
    assert format_line(ev.kind, ev.ts, ev.fields) == lat


def test_each_made_line_carries_the_event_its_text_parses_to(raw):
    """The session feeds the event a made line carries instead of parsing the line back (what a
    capture holds is the text): on the recorded output, each carried event equals Parser.parse of
    its text, and a line whose text the parser would judge otherwise carries none."""
    out, _ = made(raw)
    parser = Parser()
    carried = [line for line in out if isinstance(line, EventLine)]
    kinds = {line.event.kind for line in carried}
    assert len(carried) > 1000 and kinds == {"vq", "vq_lat", "vq_vdev"}, kinds
    assert all(parser.parse(line) == line.event for line in carried)
    assert parser.malformed == 0
    # a value read as None (-1), a word with a space, a field not a number, a required one missing
    assert event_line("vq", 5, {"pool": "p", "vd": "0x1", "class": 2, "pend_max": -1}).event.get("pend_max") is None
    for fields in ({"pool": "a b", "vd": "0x1", "class": 2}, {"pool": "p", "vd": "0x1", "class": 2, "guid": "x"},
                   {"pool": "p", "vd": "0x1", "class": -1}):
        line = event_line("vq", 5, fields)
        assert not isinstance(line, EventLine) and line == format_line("vq", 5, fields)


@pytest.mark.parametrize("where", ["first", "middle"])
def test_a_torn_reading_of_the_depth_costs_one_line_not_the_uptime(raw, where):
    """D's totals can be copied while a preempted probe is half-way through an I/O's counts: the
    depth one off against the sum of entry times for one dump (the next is whole again). As the
    recorded dumps are deltas, that is one I/O's entry time missing from pend_us in one dump and
    back in the next (or there one dump early), for one busy key.
    Read as it is, the integral jumps by the uptime (tests/vq_ledger.py refuses it); the reader
    keeps the books' rule instead and ends where the untorn run ends. A key's first line has no
    line before: it is held to the waits that ended (the tear reads as one I/O less pending)."""
    from vq_ledger import ledger_errors

    dumps = [i for i, line in enumerate(raw) if line.startswith("zfsobs 1 vq_dump ")]
    counts = re.compile(r"^@vq_n(\d+)\[(-?\d+), (-?\d+), (-?\d+), -?\d+\]: ")
    clean, _ = made(raw)
    lines = [(int(line.split()[3]), key_values(line.split())) for line in clean if line.startswith("zfsobs 1 vq ")]
    shown = {(f["vd"], f["class"], ts) for ts, f in lines if f["final"] == "0"}
    gone = {(f["vd"], ts) for ts, f in lines if f["final"] == "1"}
    ends = {i: int(key_values(raw[i].split())["end"]) for i in dumps}
    seen: dict[str, int] = {}       # a key's (pid, vd, class) first line
    for i, line in enumerate(raw):
        if m := counts.match(line):
            seen.setdefault(m.group(2, 3, 4), i)

    def torn_here(i):       # a key with a line of this dump, its vdev not final in this dump or the next two
        m = counts.match(raw[i])
        later = [j for j in dumps if j > i][:2]
        if not m or len(later) < 2 or (where == "first" and seen[m.group(2, 3, 4)] != i):
            return False
        vd = f"{int(m.group(3)) & vq_dumps.MASK:#x}"
        times = [ends[max(j for j in dumps if j < i)]] + [ends[j] for j in later]
        return (vd, str(int(m.group(4)) & 15), times[0]) in shown and not any((vd, t) in gone for t in times)
    start = dumps[len(dumps) // 2] if where == "middle" else 0
    at = next(i for i in range(start, len(raw)) if torn_here(i))
    m = counts.match(raw[at])
    key = f"@vq_n{m.group(1)}[{m.group(2)}, {m.group(3)}, {m.group(4)}, {fields.VDEV_QUEUE.slot('pend_us')[1]}]"
    dump = max(j for j in dumps if j < at)
    nxt = next(j for j in dumps if j > at)
    torn = list(raw)
    # an entry time of the dump's (us): missing (a pending I/O more than the times say), or early
    step = -ends[dump] // 1000 if where == "middle" else ends[dump] // 1000
    for first, delta in ((dump, step), (nxt, -step)):       # the next dump: the count is whole again
        end = next(k for k in range(first, len(torn)) if torn[k].startswith("zfsobs 1 vq_dump_end "))
        had = [k for k in range(first, end) if torn[k].startswith(key + ": ")]
        if had:
            torn[had[0]] = f"{key}: {int(torn[had[0]].split(': ')[1]) + delta}"
        else:
            torn.insert(end, f"{key}: {delta}")
    mended, _ = made(torn)
    assert ledger_errors(clean) == [] and ledger_errors(mended) == []
    finals = [[line for line in out if line.startswith("zfsobs 1 vq ") and " final=1 " in line]
              for out in (clean, mended)]
    assert finals[0] and finals[0] == finals[1]
    # and without the rule the same reading breaks the books
    unguarded = vq_dumps.VqDumps._untorn
    try:
        vq_dumps.VqDumps._untorn = lambda self, key, end, got, depths, tops, done, last: got
        assert ledger_errors(made(torn)[0])
    finally:
        vq_dumps.VqDumps._untorn = unguarded
