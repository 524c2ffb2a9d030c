"""The capture/replay/report path with D-format output. No dtrace can run here, so nothing below
came from a D script: the lines are built from the D scripts' own printf/printa formats
(probes/illumos/*.d), filled with the values of a real Linux lab capture (tests/data/lab-2.1.11.cap,
one ztest process), with each D constant kept as D prints it (pid=0, final=0, untracked=-1) and
zil's D shape (each txg's counts added to its slot's totals, as zil.d prints them, made a txg's
part again by zfsobs/sources/d_slots.py, then one final=1 line of zeros). That capture goes through the normal record format, report and
replay."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import dlint  # noqa: E402

from zfsobs.capture import CaptureWriter, read_capture  # noqa: E402
from zfsobs.events import Parser  # noqa: E402
from zfsobs.sources.d_slots import KINDS, TAG_SHIFT, DSlots  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "tests" / "data" / "lab-2.1.11.cap"
ZFSOBS = [sys.executable, "-m", "zfsobs"]
FORMATS = {k: v for n in ("txg", "zil", "vdev_queue", "vdev_cache")
           for k, v in dlint.formats((ROOT / "probes" / "illumos" / f"{n}.d").read_text()).items()}


def fill(fmt: str, ts: int, fields: dict, **override) -> str:
    """A D format line with its conversions replaced by the event's values."""
    out = fmt.split()
    out[3] = str(ts)
    for i, tok in enumerate(out[4:], 4):
        key, _, value = tok.partition("=")
        if dlint.conversions(value):
            got = override.get(key, fields.get(key))
            out[i] = f"{key}={-1 if got is None else got}"
    return " ".join(out)


def pick(kind: str, final: bool) -> str:
    """The format D prints `kind` with: final=1 lines only where the script has them."""
    fmts = FORMATS[kind]
    want = [f for f in fmts if ("final=1" in f) == final] or [f for f in fmts if "final=1" not in f]
    return want[0]


def d_lines(lab_lines: list[str]) -> tuple[list[str], int, list]:
    """The lines a DtraceSource hands on: zil's as zil.d prints them (each txg's counts added to
    its slot's totals, txg & 7, a maximum tagged with its round) through DSlots, which makes them
    a txg's parts again; the others as their scripts print them."""
    parser = Parser()
    events = [e for e in map(parser.parse, lab_lines) if e is not None]
    pid = Counter(e.get("pid") for e in events if e.kind == "txg").most_common(1)[0][0]
    out, zil_final, totals, slots = [], [], {}, DSlots()
    for ev in events:
        if ev.get("pid") != pid or ev.kind not in FORMATS and ev.kind + "_c" not in FORMATS \
                or ev.kind in ("hello", "bye"):
            continue
        f = {k: v for k, v in ev.fields.items()}
        if ev.kind.startswith("zil"):
            if ev.get("final") != 1:        # D prints a txg's parts once each: take the whole ones
                continue
            txg, seg = int(f["txg"]), f.get("seg")
            slot = totals.setdefault((ev.kind, f["pool"], seg, txg & 7), {})
            for name, value in f.items():
                if name in ("pool", "pid", "txg", "cpu", "final", "seg"):
                    continue
                if name in KINDS[ev.kind + "_c"][1]:
                    slot[name] = (txg >> 3) << TAG_SHIFT | value
                else:
                    slot[name] = slot.get(name, 0) + value
            # the slot's latest event (its ts and cpu) came before the txg's sync began (the final's);
            # the lab's txg has a part per CPU, each a flush of its own here
            line = fill(FORMATS[ev.kind + "_c"][0], ev.ts - 1 - int(f["cpu"]), dict(slot, pool=f["pool"], txg=txg, seg=seg,
                                                                   spa="ffff8881deadbe00", slot=txg & 7))
            out += slots.feed(line)
            if ev.kind == "zil":
                zil_final.append(ev)
                marker = (ev.ts, f["pool"], f["txg"])
                if marker not in {tuple(m) for m in out_markers(out)}:
                    out.append(fill(pick("zil", True), ev.ts, {"pool": f["pool"], "txg": f["txg"], "cpu": ev.ts}))
        else:
            out.append(fill(pick(ev.kind, ev.get("final") == 1 and ev.kind == "vq_vdev"), ev.ts, f))
    return out, pid, zil_final


def out_markers(lines: list[str]):
    for line in lines:
        if line.startswith("zfsobs 1 zil ") and " final=1 " in line:
            parts = dict(t.split("=", 1) for t in line.split()[4:])
            yield int(line.split()[3]), parts["pool"], int(parts["txg"])


@pytest.fixture(scope="module")
def dcap(tmp_path_factory):
    lab = read_capture(str(LAB))
    lines, pid, zil_final = d_lines(lab.lines)
    path = tmp_path_factory.mktemp("illumos") / "d-format.cap"
    meta = dict(lab.meta, source="dtrace", note="built from the D formats with lab-2.1.11.cap values")
    meta["probes"] = {n: {"sha256": "", "functions": [], "dropped": []} for n in ("txg", "zil", "vdev_queue", "vdev_cache")}
    writer = CaptureWriter(str(path), meta)
    for n in ("txg", "zil", "vdev_queue", "vdev_cache"):
        writer.add(f"zfsobs 1 hello {lines[0].split()[3]} probe={n} target=kernel")
    for line in lines:
        writer.add(line)
    writer.close({"reason": "duration reached", "events": len(lines), "malformed": 0, "lost": 0, "dropped_at_stop": 0})
    return {"path": str(path), "lines": lines, "pid": pid, "lab": lab, "zil_final": zil_final}


def test_every_d_format_line_parses(dcap):
    parser = Parser()
    kinds = Counter(e.kind for e in map(parser.parse, dcap["lines"]) if e is not None)
    assert parser.malformed == 0 and parser.unknown_kinds == 0
    assert set(kinds) == {"txg", "zil", "zil_itx", "zil_lat", "vq", "vq_lat", "vq_vdev", "vc"}


def test_report_reads_the_d_capture(dcap):
    res = subprocess.run(ZFSOBS + ["report", dcap["path"], "--format", "json"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    want = [e for e in map(Parser().parse, dcap["lab"].lines) if e is not None and e.kind == "txg" and e.get("pid") == dcap["pid"]]
    assert sorted(t["sync_ns"] for t in data["txgs"]) == sorted(e.fields["sync_ns"] for e in want)
    assert all(t["pid"] == 0 for t in data["txgs"])
    commits = sum(e.fields["commits"] for e in dcap["zil_final"])
    assert commits > 0 and sum(r["commits"] for r in data["zil"]) == commits
    assert all(r["final"] for r in data["zil"])      # each txg's zeros line closed its row
    assert data["vdev_queue"] and data["vdev_cache"]
    assert data["meta"]["source"] == "dtrace"


def test_replay_reads_the_d_capture(dcap):
    res = subprocess.run(ZFSOBS + ["replay", dcap["path"]], capture_output=True, text=True)    # not a tty
    assert res.returncode == 0, res.stderr
    body = res.stdout.splitlines()
    assert body[0].split()[:3] == ["time", "pool", "txg"]
    assert len(body) == 1 + sum(1 for line in dcap["lines"] if line.startswith("zfsobs 1 txg "))


def test_text_report_has_every_section(dcap):
    res = subprocess.run(ZFSOBS + ["report", dcap["path"]], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert re.search(r"(?i)zil", res.stdout) and re.search(r"(?i)vdev", res.stdout)
