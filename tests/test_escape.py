"""Terminal and CSV injection: a capture (or a traced system) whose pool, vdev and tunable names,
host, target path and trailer carry terminal escapes (OSC 52 clipboard, OSC 0 window title ended
by ESC \\, CSI clear screen, a carriage return, a bidi override, a C1 CSI) or a spreadsheet formula.
The recorded lab capture is written again with those strings in it (the capture writer: a
well-formed file), and every output is read as bytes: what reaches a terminal, a log or a
spreadsheet shows each control as its escape (zfsobs/safe.py) and sends none."""
from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys

import pytest
from prometheus_client import exposition
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families as prom_parse
from prometheus_client.registry import CollectorRegistry
from rich.console import Console
from rich.segment import Segment

from conftest import recorded_capture
from zfsobs import safe
from zfsobs.capture import CaptureWriter, read_capture
from zfsobs.errors import ZfsobsError
from zfsobs.events import Parser
from zfsobs.model import Model
from zfsobs.views.exporter import Snapshot
from zfsobs.views.paint import Frame, Painter
from zfsobs.views.prometheus import families
from zfsobs.views.replay import Replayer
from zfsobs.views.screen import Fit, render_screen
from zfsobs.views.vqstat import Vqstat
from zfsobs.views.zilstat import Zilstat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZFSOBS = [sys.executable, "-m", "zfsobs"]
OSC52 = "\x1b]52;c;cHduZWQ=\x07"          # sets the clipboard
TITLE = "\x1b]0;pwned\x1b\\"              # sets the window title, ended by ST (ESC \), not BEL
CLEAR = "\x1b[2J\x1b[H"
# no whitespace: a pool name is one token of an event line
POOL = '=HYPERLINK("evil.invalid","ok")' + OSC52 + TITLE + CLEAR + "\u202e" + "\x9b"
HOST = "build" + TITLE + "\rroot@trusted" + OSC52 + "\u202e\x9b"
TARGET = "/usr/lib/" + TITLE + "libzpool.so.5"
TUNABLE = "@SUM(1)" + OSC52
REASON = "ztest said " + TITLE + CLEAR
# what must never be in an output: C0 but \n, DEL, C1, bidi and other format characters, as
# text; ESC, BEL and CR as bytes too
BAD = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")


def clean(data: bytes) -> str:
    """The output as text, asserted to hold no control a terminal or a spreadsheet would act on."""
    assert b"\x1b" not in data and b"\x07" not in data and b"\r" not in data
    text = data.decode("utf-8")
    found = BAD.findall(text)
    assert not found, found[:5]
    return text


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> str:
    """The recorded lab capture with the hostile strings in its header, lines and trailer."""
    src = read_capture(recorded_capture())
    pool = src.meta["pools"][0]
    meta = json.loads(json.dumps(src.meta).replace(pool, json.dumps(POOL)[1:-1]))
    meta["host"] = HOST
    meta["target"]["path"] = TARGET
    path = str(tmp_path_factory.mktemp("hostile") / "hostile.cap")
    w, parser = CaptureWriter(path, meta, force=True), Parser()
    first = None
    for line in src.lines:
        line = line.replace(pool, POOL)
        ev = parser.parse(line)
        first = first if first is not None or ev is None else ev.ts
        w.add(line, ev)
    w.add(f"zfsobs 1 tunable {first} name={TUNABLE} old=-1 new=5 pid=1 src=mem initial=1")
    w.close(dict(src.trailer, reason=REASON))
    assert parser.malformed == 0
    return path


def zfsobs(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(ZFSOBS + list(args), capture_output=True, timeout=120, cwd=ROOT, env=env)


@pytest.mark.parametrize("args", [["--format", "text"], ["--compare"], ["--compare", "--format", "json"]],
                         ids=["text", "compare-text", "compare-json"])
def test_report_text_shows_every_control_escaped(hostile, args):
    run = zfsobs("report", hostile, *args)
    assert run.returncode == 0, run.stderr
    out = clean(run.stdout)
    clean(run.stderr)
    if "json" in args:      # json.dumps escapes them (\u001b): the data keeps the names exactly
        assert json.loads(out)["meta"]["host"] == HOST
    else:
        assert "\\x1b]0;pwned\\x1b\\" in out and "\\x9b" in out and "\\u202e" in out
        assert safe.text(HOST) in out


def test_report_json_keeps_the_names_and_sends_no_control(hostile):
    run = zfsobs("report", hostile, "--format", "json")
    assert run.returncode == 0, run.stderr
    data = json.loads(clean(run.stdout))
    assert data["meta"]["host"] == HOST and data["meta"]["trailer"]["reason"] == REASON
    assert {r["pool"] for r in data["txgs"]} == {POOL}


@pytest.mark.parametrize("section", ["txgs", "zil", "vdev_queue", "vdev_cache"])
def test_report_csv_cells_are_no_formulas_and_numbers_stay_numbers(hostile, section):
    run = zfsobs("report", hostile, "--format", "csv", "--section", section)
    assert run.returncode == 0, run.stderr
    rows = list(csv.DictReader(io.StringIO(clean(run.stdout))))
    assert rows
    for row in rows:
        assert row["pool"] == "'" + safe.text(POOL)
        for key, value in row.items():       # a number, a word of zfsobs's, or a neutralised string
            assert value in ("", "True", "False") or re.fullmatch(r"-?[0-9.e+-]+|[a-z_]+|'.*|/.*", value), (key, value)
        assert float(row["txg" if section in ("txgs", "zil") else "pid"]) > 0


def test_report_compare_csv_cells_are_no_formulas(hostile):
    run = zfsobs("report", hostile, "--compare", "--format", "csv")
    assert run.returncode == 0, run.stderr
    rows = list(csv.DictReader(io.StringIO(clean(run.stdout))))
    assert rows and {r["pool"] for r in rows} == {"'" + safe.text(POOL)}
    assert all(float(r["mean"]) >= 0 for r in rows if r["mean"])


def test_cell_neutralises_a_formula_and_writes_numbers_as_numbers():
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(
        [safe.cell(v) for v in (-5, -0.25, 3, "-5", "=1+1", " =1", "+x", "@SUM(A1)", "\tx", "＝1", "ok", None)])
    assert out.getvalue() == "-5,-0.25,3,'-5,'=1+1,' =1,'+x,'@SUM(A1),\\x09x,'＝1,ok,\n"


def test_text_escapes_every_control_and_is_idempotent():
    s = "a\x00\x1b\x7f\x9b\u202e\u2066\u200b\u2028\ud800\U000e0001\t\n\r b\\x1b é ü 中"
    once = safe.text(s)
    assert once == ("a\\x00\\x1b\\x7f\\x9b\\u202e\\u2066\\u200b\\u2028\\ud800\\U000e0001\\x09\\x0a\\x0d b\\x1b"
                    " é ü 中")
    assert safe.text(once) == once and once.isprintable()


def test_openmetrics_export_label_values_are_escaped(hostile):
    run = zfsobs("report", hostile, "--format", "openmetrics")
    assert run.returncode == 0, run.stderr
    text = clean(run.stdout)
    quoted = {k: safe.text(v).replace("\\", "\\\\").replace('"', '\\"') for k, v in (("zpool", POOL), ("instance", HOST))}
    for label, value in quoted.items():
        found = set(re.findall(label + r'="((?:[^"\\]|\\.)*)"', text))
        assert found == {value}, (label, found)


@pytest.mark.parametrize("exposition", [exposition.generate_latest, openmetrics.generate_latest],
                         ids=["prometheus", "openmetrics"])
def test_exporter_label_values_are_escaped_and_the_exposition_parses(hostile, exposition):
    """The exporter's /metrics body, from the model as the live session has it."""
    model = Model(keep=None, counters=True)
    for ev in read_capture(hostile).events(Parser(), digests=False):
        model.feed(ev)
    snap = Snapshot()
    snap.latest = families(model, {"host": HOST})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(snap)
    text = clean(exposition(registry))
    parse = om_parse if exposition is openmetrics.generate_latest else prom_parse
    labels = [s.labels for fam in parse(text) for s in fam.samples]
    assert {lab["zpool"] for lab in labels if "zpool" in lab} == {safe.text(POOL)}
    vdevs = {lab["vdev"] for lab in labels if "vdev" in lab}
    assert vdevs and all(safe.text(POOL) in v and v.isprintable() for v in vdevs)
    assert {lab["name"] for lab in labels if "name" in lab} == {safe.text(TUNABLE)}
    assert {lab["host"] for lab in labels if "host" in lab} == {safe.text(HOST)}


def test_piped_replay_prints_the_pool_escaped(hostile):
    run = zfsobs("replay", hostile)
    assert run.returncode == 0, run.stderr
    lines = clean(run.stdout).splitlines()
    assert len(lines) > 10 and all(safe.text(POOL) in line for line in lines[1:])


def test_an_error_quoting_a_hostile_path_is_one_escaped_line(tmp_path):
    missing = str(tmp_path / ("x" + TITLE + OSC52 + "\u202e"))
    run = zfsobs("report", missing)
    assert run.returncode != 0
    err = clean(run.stderr)
    assert err.count("\n") == 1 and err.startswith("zfsobs: ") and "\\x1b]0;pwned" in err
    assert str(ZfsobsError("a\x1bb\nc")) == "a\\x1bb\\x0ac"


def test_doctor_shows_a_hostile_tracer_path_and_version_escaped(tmp_path):
    fake = tmp_path / ("bpftrace" + TITLE)
    fake.write_text("#!/bin/sh\nprintf 'bpftrace v0.17.0\\033]52;c;cHduZWQ=\\007\\033[2J\\n'\n")
    fake.chmod(0o755)
    run = zfsobs("doctor", "--quick", env=dict(os.environ, ZFSOBS_BPFTRACE=str(fake)))
    out = clean(run.stdout)
    clean(run.stderr)
    assert "bpftrace\\x1b]0;pwned\\x1b\\" in out and "v0.17.0\\x1b]52;c;" in out


def _model(path: str) -> tuple[Model, list]:
    model, events = Model(keep=None), []
    for ev in read_capture(path).events(Parser(), digests=False):
        model.feed(ev)
        events.append(ev)
    return model, events


def test_zilstat_and_vqstat_lines_show_the_names_escaped(hostile):
    model, events = _model(hostile)
    out = io.StringIO()
    zs = Zilstat(model, read_capture(hostile).meta, None, None, out=out)
    for ev in events:
        zs.on_event(ev)
    zs.finish()
    text = clean(out.getvalue().encode())
    assert text.count(safe.text(POOL)) >= 10
    out = io.StringIO()
    vq = Vqstat(model, {}, 1.0, None, verbose=True, out=out)
    s = max(model.vq.series.values(), key=lambda s: s.last.values["enq"])
    end = s.lines[len(s.lines) // 2].ts
    vq.interval(end - 10**9, end)
    text = clean(out.getvalue().encode())
    assert safe.text(POOL)[:24] in text


def _replayed(path: str) -> Replayer:
    rp = Replayer(read_capture(path))
    rp.seek(rp.start + (rp.end - rp.start) // 2)
    return rp


def test_the_screen_shows_what_a_person_would_see_escaped(hostile):
    rp = _replayed(hostile)
    rp.status.message = str(ZfsobsError("source ended: " + REASON))
    console = Console(file=io.StringIO(), width=200, height=60, record=True, color_system=None)
    console.print(render_screen(rp.model, rp.status, 60, rp.cursor, Fit()))
    seen = console.export_text(clear=False)
    clean(seen.encode())
    for shown in (safe.text(HOST), safe.text(TARGET), safe.text(POOL)[:20], safe.text(TUNABLE),
                  "\\x1b[2J\\x1b[H"):
        assert shown in seen, shown
    svg = console.export_svg()
    assert "\x1b" not in svg and "\\x1b]52;c;" in svg


def test_the_painted_terminal_gets_no_sequence_but_the_screen_s_own(hostile):
    rp = _replayed(hostile)
    term = io.StringIO()
    console = Console(file=term, width=160, height=50, force_terminal=True, color_system="standard")
    with Painter(console) as painter:
        painter.paint(render_screen(rp.model, rp.status, 50, rp.cursor, Fit()))
    data = term.getvalue()
    # the screen's own: SGR colours, the cursor home, the alternate screen and the cursor shown/hidden
    own = re.sub(r"\x1b\[[0-9;]*m|\x1b\[H|\x1b\[\?1049[hl]|\x1b\[\?25[hl]", "", data)
    clean(own.encode())
    assert safe.text(POOL)[:20] in own


def test_a_string_a_panel_missed_is_escaped_at_the_terminal():
    console = Console(file=io.StringIO(), width=40, height=2, force_terminal=True, color_system=None)
    console.print(Frame([[Segment("pool " + OSC52 + TITLE)]], 40, 2), end="")
    out = console.file.getvalue()
    assert "\x1b" not in out and "\x07" not in out and "\\x1b]52;c;" in out
