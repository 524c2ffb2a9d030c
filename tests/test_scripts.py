"""Every benchmark script with a command line starts: `--help` runs its imports, so a name that
moved inside zfsobs breaks this test, not the next person's benchmark run."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARGPARSE = sorted(p for p in (ROOT / "scripts").iterdir()
                  if p.is_file() and "argparse" in p.read_text(errors="replace"))


def test_scripts_with_a_command_line_are_found():
    assert {"bench", "soak"} <= {p.name for p in ARGPARSE}


@pytest.mark.parametrize("script", ARGPARSE, ids=lambda p: p.name)
def test_script_help_runs(script):
    run = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "usage:" in run.stdout
