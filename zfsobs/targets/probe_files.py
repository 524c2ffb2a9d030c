"""probes/: where the probe scripts and offsets.json are (a source checkout's, else the copy
installed with the package), and offsets.json read. Both the target (a build's identity) and the
offsets and rendering of probes use it."""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path


def probes_dir() -> Path:
    """probes/ of a source checkout, else the copy installed with the package."""
    checkout = Path(__file__).resolve().parents[2] / "probes"
    if (checkout / "linux").is_dir():
        return checkout
    return Path(str(resources.files("zfsobs") / "_probes"))


def offsets_table() -> dict:
    """probes/offsets.json: struct layouts per build (its "_about" says where they come from)."""
    return json.loads((probes_dir() / "offsets.json").read_text())
