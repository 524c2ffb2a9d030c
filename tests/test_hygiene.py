"""What zfsobs must never do, checked on its own text: run a probe with bpftrace's unsafe actions
(system(), --unsafe), or execute anything a capture holds (pickle, eval, exec; replay's in-memory
states and its seek index's points are the only pickles, checked to come from nowhere else)."""
from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROBES = sorted((ROOT / "probes").rglob("*.bt")) + sorted((ROOT / "probes").rglob("*.btm"))
CODE = sorted((ROOT / "zfsobs").rglob("*.py"))


def test_probe_scripts_use_no_unsafe_action():
    assert PROBES
    for path in PROBES:
        text = path.read_text()
        for action in ("system(", "unsafe", "signal(", "override("):
            assert action not in text, f"{path.name}: {action}"


def test_no_code_runs_bpftrace_unsafe_or_executes_data():
    assert CODE
    for path in CODE:
        text = path.read_text()
        assert "--unsafe" not in text, path.name
        # the two uses of pickle: replay's own model states and the seek index's points, made by
        # pickle.dumps in the same process and kept in memory; nothing read from a file or a capture
        own = {"replay.py": "pickle.loads(zlib.decompress(self.snaps[kept]))",
               "seek_index.py": "pickle.loads(zlib.decompress(blob))"}
        if path.name in own:
            loads = re.findall(r"pickle\.loads?\([^\n]*", text)
            assert loads == [own[path.name]], loads
            text = text.replace("pickle", "")
        for pattern in (r"\bpickle\b", r"\beval\(", r"\bexec\(", r"\bmarshal\b", r"yaml\.load\("):
            assert not re.search(pattern, text), f"{path.name}: {pattern}"
