"""The D scripts for illumos (probes/illumos/*.d), checked statically: no illumos and no D compiler
here (docs/illumos.md lists what is and is not verified). Each script prints the same event kinds
and fields as its Linux twin, in the schema; every fbt function, sdt probe, struct member and
kernel global it names is in probes/illumos/facts.json, read from the illumos ZFS sources by
scripts/illumos-facts; and the text passes tests/dlint.py's checks."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import dlint  # noqa: E402

from zfsobs.sources import d_slots, set_lines, vq_dumps  # noqa: E402
from zfsobs.targets import render as probes  # noqa: E402
from zfsobs.targets.d_render import script_text  # noqa: E402
from zfsobs.events import REQUIRED, WORD_FIELDS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
D_DIR = ROOT / "probes" / "illumos"
NAMES = ("txg", "zil", "vdev_queue", "vdev_cache", "throttle")
FACTS = json.loads((D_DIR / "facts.json").read_text())
MIRROR = "/work/.mirror/openzfs+openzfs/repo"     # where `fetch` puts openzfs/openzfs on these machines


def d_text(name: str) -> str:
    return (D_DIR / f"{name}.d").read_text()


def test_every_linux_probe_has_a_d_twin():
    assert sorted(p.stem for p in D_DIR.glob("*.d")) == sorted(probes.available()) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_same_kinds_and_fields_as_the_bt_twin(name):
    assert d_events(name) == stream_events(name)


def d_events(name: str) -> dict:
    """The kinds and fields the D script's stream carries: its slot totals (zil_c, txg_thr_c, ...)
    as zfsobs/sources/d_slots.py makes them into its twin's lines."""
    out: dict = {}
    for kind, sets in dlint.events(d_text(name)).items():
        if kind in d_slots.KINDS:
            kind, _, per_cpu = d_slots.KINDS[kind]
            added = {"pid"} | ({"cpu", "final"} if per_cpu else set())
            sets = {frozenset(f - set(d_slots.SLOT_KEYS) | added) for f in sets}
        out.setdefault(kind, set()).update(sets)
    return out


def stream_events(name: str) -> dict:
    """The kinds and fields the Linux probe's stream carries: the vdev queue's after
    zfsobs/sources/vq_dumps.py has made its dumps into lines (DTrace sums over CPUs itself), and the
    map-set probes' after zfsobs/sources/set_dumps.py has (zfsobs/sources/set_lines.py)."""
    events = dlint.events(probes.source(name))
    if name == "vdev_queue":
        # bye's held counts ticks of bpftrace's map-set turn, which DTrace (no sets) has not
        events = {k: v for k, v in events.items() if k not in vq_dumps.OWN}
        events["bye"] = {frozenset(f - {"held"}) for f in events["bye"]}
        events.update((kind, {frozenset(fields)}) for kind, fields in vq_dumps.LINES.items())
    if name in set_lines.STREAMS:
        # the map sets' dumps, made into the probe's lines (zfsobs/sources/set_dumps.py)
        events = {k: v for k, v in events.items() if k not in set_lines.OWN}
        events.update((kind, {frozenset(fields)}) for kind, fields in set_lines.STREAMS[name].lines.items())
    if name == "throttle":
        # late: the .bt's line of what a txg's line missed; D's slot totals miss no count (a rise
        # after the txg's flush is a line of its own)
        events["txg_thr"] = {frozenset(f - {"late"}) for f in events["txg_thr"]}
    return events


def test_openzfs_22s_vdev_queue_script_passes_the_checks_and_prints_what_the_bt_prints():
    """probes/dtrace-openzfs/vdev_queue.d (Linux's and FreeBSD's OpenZFS 2.2+, where illumos's
    functions are inlined) prints the .bt's own lines and dumps, for zfsobs/sources/vq_dumps.py."""
    text = script_text(ROOT / "probes" / "dtrace-openzfs" / "vdev_queue.d")
    assert dlint.parse(text).problems == []
    raw = dlint.events(probes.source("vdev_queue"))
    raw["bye"] = {frozenset(f - {"held"}) for f in raw["bye"]}
    raw["vq_dump"] = {frozenset(f - {"late"}) for f in raw["vq_dump"]}     # the .bt's sets by the clock
    raw["vq_dump"] = {f | {"round"} for f in raw["vq_dump"]}   # D's totals: d_slots.DumpTotals reads it
    assert dlint.events(text) == raw
    printed = [m for fmt in re.findall(r'print[af]\("([^"]*)"', text) for m in re.findall(r"(@vq_\w+)\[", fmt)]
    assert sorted(set(printed)) == ["@vq_lma", "@vq_lmi", "@vq_lt", "@vq_n0", "@vq_x0"]


@pytest.mark.parametrize("name", NAMES)
def test_lines_fit_the_schema(name):
    for kind, lines in dlint.formats(d_text(name)).items():
        added = set()
        if kind in d_slots.KINDS:     # slot totals: the line d_slots.py makes of them is checked
            kind, _, per_cpu = d_slots.KINDS[kind]
            added = {"pid"} | ({"cpu", "final"} if per_cpu else set())
        for line in lines:
            fields = {k: v for k, v in (tok.split("=", 1) for tok in line.split()[4:])
                      if not (added and k in d_slots.SLOT_KEYS)}
            assert set(REQUIRED.get(kind, ())) <= set(fields) | added, (kind, line)
            assert dlint.conversions(line.split()[3]) in (["d"], ["@"]), f"{kind}: ts_ns must be an integer"
            for key, value in fields.items():
                conv = dlint.conversions(value)
                if key in WORD_FIELDS:
                    assert conv in ([], ["s"], ["x"]) or value.startswith("0x"), (kind, key, value)
                else:
                    assert conv in ([], ["d"], ["@"]) and (conv or re.fullmatch(r"-?\d+", value)), (kind, key, value)


@pytest.mark.parametrize("name", NAMES)
def test_d_text_passes_the_static_checks(name):
    script = dlint.parse(d_text(name))
    assert script.problems == []
    assert script.clauses and all(c.probes for c in script.clauses)
    assert "#pragma D option quiet" in script.pragmas     # unquiet dtrace prefixes every line


@pytest.mark.parametrize("broken, problem", [
    (lambda t: t.replace("self->start, self->sync_ns,", "self->start,", 1), "printf has"),
    (lambda t: t.replace("this->t3 = txg_syncing", "this->t9 = txg_syncing", 1), "this->t3 is read but never set"),
    (lambda t: t.replace("sdt:::txg-opened\n{", "sdt:txg-opened\n{", 1), "bad probe description"),
    (lambda t: t.replace("#pragma D option quiet", "#pragma D option quite", 1), "unknown pragma"),
    (lambda t: t.replace("#pragma D option argref\n", "", 1), "needs #pragma D option argref"),
    (lambda t: t + "\n// note\n", "// comment"),
    (lambda t: t.replace("txg_birth[arg0, arg1] = timestamp;", "txg_birth[arg0, arg1] = timestamp", 1), "no ;"),
])
def test_the_checker_catches_breakage(broken, problem):
    assert any(problem in p for p in dlint.parse(broken(d_text("txg"))).problems)


@pytest.mark.parametrize("name, broken, problem", [
    # the declaration DTrace 2.0.7 asked for ('txg_last_start has not yet been declared or assigned')
    ("txg", lambda t: t.replace("uint64_t txg_last_start[uint64_t];\n", "", 1), "txg_last_start[] is read before"),
    # zil.d as it was: the flag tested after a predicated clause, never reset (a commit counted twice)
    ("zil", lambda t: t.replace("\tthis->on = 0;\n\tthis->b = 0;\n", "\tthis->b = 0;\n", 1),
     "this->on in the predicate may be stale for fbt::zil_commit_impl:return"),
    # zil.d as it was: the itx type bucket in this->slot, the txg slot every aggregation is keyed by
    ("zil", lambda t: t.replace("this->tx = this->type", "this->slot = this->type", 1).replace("this->tx ==", "this->slot =="),
     "this->slot keys aggregations and is given a second meaning here"),
])
def test_the_checker_catches_what_dtrace_refuses_or_gets_wrong_by_order(name, broken, problem):
    assert dlint.parse(d_text(name)).problems == []
    assert any(problem in p for p in dlint.parse(broken(d_text(name))).problems)


def test_the_checker_catches_a_printa_mismatch():
    text = d_text("vdev_cache").replace("@vdecl, @vdb, @vsize", "@vdecl, @vsize", 1)
    assert any("printa has" in p for p in dlint.parse(text).problems)


def used_names(text: str) -> dict[str, set[str]]:
    """What the code (not the comments) names: fbt functions, sdt probes, members, globals."""
    code = dlint.strip_comments(text)
    script = dlint.parse(text)
    probes_used = {p for c in script.clauses for p in c.probes}
    code = re.sub(r'"(?:[^"\\]|\\.)*"', '""', code)
    return {
        "probes": probes_used,
        "members": set(re.findall(r"(?<!self)(?<!this)->(\w+)", code)) | set(re.findall(r"(?<=[\w\])])\.(\w+)", code)),
        "globals": set(re.findall(r"`(\w+)", code)),
    }


@pytest.mark.parametrize("name", NAMES)
def test_every_name_a_script_uses_is_in_its_header_and_in_illumos_zfs(name):
    text = d_text(name)
    used = used_names(text)
    listed = {k: set(probes._header_list(text, h)) for k, h in
              (("probes", "Probes"), ("members", "Members"), ("globals", "Globals"), ("requires", "Requires"))}
    kernel_probes = {p for p in used["probes"] if p.split(":")[0] in ("fbt", "sdt")}
    assert kernel_probes == listed["probes"]
    assert listed["requires"] <= listed["probes"]
    assert used["members"] == {m.split(".")[1] for m in listed["members"]}
    assert used["globals"] == listed["globals"]
    for probe in listed["probes"]:
        provider, _, function, pname = probe.split(":")
        assert (function in FACTS["functions"]) if provider == "fbt" else (pname in FACTS["sdt"]), probe
    assert listed["members"] <= set(FACTS["members"])
    assert listed["globals"] <= set(FACTS["globals"])


def test_facts_file_is_small_complete_and_sourced():
    assert FACTS["missing"] == []
    assert re.fullmatch(r"[0-9a-f]{40}", FACTS["source"]["commit"])
    assert (D_DIR / "facts.json").stat().st_size < 8000
    counts = {k: len(FACTS[k]) for k in ("functions", "sdt", "members", "globals")}
    assert counts == {"functions": 14, "sdt": 5, "members": 29, "globals": 21}


@pytest.mark.skipif(not os.path.isdir(MIRROR), reason=f"no openzfs/openzfs mirror at {MIRROR} (fetch it to run)")
def test_facts_script_regenerates_the_committed_file(tmp_path):
    out = tmp_path / "facts.json"
    done = subprocess.run([str(ROOT / "scripts" / "illumos-facts"), MIRROR, FACTS["source"]["commit"]],
                          env=dict(os.environ, ZFSOBS_FACTS_OUT=str(out)), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text()) == FACTS


def test_facts_script_bad_input_is_one_line(tmp_path):
    done = subprocess.run([str(ROOT / "scripts" / "illumos-facts"), str(tmp_path)], capture_output=True, text=True)
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
