"""`zfsobs doctor` says which probes load with the bpftrace in use (zfsobs/doctor/probe_load.py): real
bpftrace, no mocks. The host's 0.17 (no --dry-run: a run that exits at once) in seconds; Debian 13's
0.23 and sid's 0.27 (--dry-run) in the lab tier, through scripts/bpftrace-chroot. Every load is on
a private copy of the library: no process's probes fire."""
from __future__ import annotations

import dataclasses
import filecmp
import io
import os
import re
import shutil

import pytest

from conftest import lab_ready
from zfsobs.doctor import report as doctor, probe_load
from zfsobs.targets import render as probes
from zfsobs.targets.render import available, render, source
from zfsobs.sources.bpftrace_binary import bpftrace_version
from zfsobs.targets.target import find_libraries, libzpool

REFUSED = "\nBEGIN { $x = 1; $x = \"a string\"; }\n"     # a type change: every release rejects it
needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("bpftrace") or not find_libraries(),
                                reason="needs root, bpftrace and an installed libzpool")


@pytest.mark.skipif(not find_libraries(), reason="needs an installed libzpool")
@pytest.mark.parametrize("dry", [False, True])
def test_a_libzpool_script_names_a_private_copy_of_the_library(tmp_path, dry):
    target = libzpool()
    copies: dict[str, str] = {}
    path = probe_load._script(str(tmp_path), 0, render("txg", target), target, copies, dry)
    text = open(path).read()
    assert target.path not in text and f"uprobe:{copies[target.path]}:spa_sync" in text
    assert text.endswith(probe_load.EXIT_AT_ONCE) != dry
    assert filecmp.cmp(target.path, copies[target.path], shallow=False)
    assert os.stat(target.path).st_ino != os.stat(copies[target.path]).st_ino


def test_which_releases_have_a_dry_run():
    assert [probe_load.has_dry_run(v) for v in ("v0.17.0", "v0.21.0", "v0.22.0", "0.23.2", "v0.27.1",
                                                "v1.0.0", "unknown", "")] == [False] * 2 + [True] * 4 + [False] * 2
    assert "--dry-run" in probe_load.how("v0.27.1") and "no --dry-run before" in probe_load.how("v0.17.0")


@needs_root
def test_doctor_rows_say_which_probes_load_with_the_hosts_bpftrace():
    bpftrace = shutil.which("bpftrace")
    version = bpftrace_version(bpftrace)
    target = libzpool()
    good = render("txg", target)
    bad = dataclasses.replace(good, text=good.text + REFUSED)
    rows = [(doctor.OK, "metric txg on libzpool", "probes spa_sync"),
            (doctor.OK, "metric txg (changed)", "probes spa_sync")]
    assert doctor.load_rows(rows, [(0, good, target), (1, bad, target)], bpftrace, version)
    assert rows[0] == (doctor.OK, "metric txg on libzpool", f"loads with bpftrace {version}; probes spa_sync")
    state, _, detail = rows[1]
    assert state == doctor.BAD and detail.startswith(f"bpftrace {version} refuses it: ")
    assert "Type mismatch for $x" in detail and detail.endswith("; probes spa_sync")
    assert rows[2] == (doctor.WARN, "probes load", f"1 of 2 with bpftrace {version} ({probe_load.how(version)})")
    # the backbone refused: nothing is traceable
    assert not doctor.load_rows([rows[1]], [(0, bad, target)], bpftrace, version)


@pytest.mark.lab
@pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ok")
@pytest.mark.parametrize("suite", ["trixie", "sid"])
def test_dry_run_loads_every_probe(suite):
    """--dry-run (0.22+) loads the programs into the kernel, not only compiles them: every probe
    rendered for the installed libzpool passes the verifier of this machine (no probe loops over
    CPUs: tests/test_probes.py)."""
    from test_lab_bpftrace_versions import VERSIONS, bpftrace_for
    bpftrace = bpftrace_for(VERSIONS[suite][1])
    target = libzpool()
    items = [(render(name, target), target) for name in available()]
    verdicts = probe_load.check(bpftrace, items, bpftrace_version(bpftrace))
    assert verdicts[:len(available())] == [""] * len(available()), dict(zip(available(), verdicts))


@pytest.mark.lab
@needs_root
def test_doctor_output_lists_the_load_of_every_metric(capsys):
    """The whole doctor, as `zfsobs doctor` prints it: every traceable metric row says whether its
    probe loads, and one row says how they were loaded."""
    out = io.StringIO()
    doctor.run(out)
    text = out.getvalue()
    version = bpftrace_version(shutil.which("bpftrace"))
    metrics = [l for l in text.splitlines() if l.startswith(("ok", "warn", "FAIL")) and " metric " in l
               and "absent:" not in l]
    assert metrics and all(f"loads with bpftrace {version}" in l for l in metrics), text
    n = len(metrics)
    assert re.search(rf"^ok +probes load +{n} of {n} with bpftrace {re.escape(version)} ", text, re.M), text
