"""The field tables (zfsobs/fields.py) are the one place counter slots come from: no probe source
and no Python file writes a slot number of a set map by hand, the models count the table's fields,
and the docs name every field the set probes' lines carry (the D twins' lines are checked against
the same lines: tests/test_illumos_probes.py)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from zfsobs import fields
from zfsobs.errors import ZfsobsError
from zfsobs.model import txg, vdev_cache, zil
from zfsobs.sources.set_lines import STREAMS
from zfsobs.targets.d_render import script_text
from zfsobs.targets.render import available, source

ROOT = Path(__file__).resolve().parents[1]
# a set map written with a key: @n0[...], @x2[...], @nSET[...]
SET_KEY = re.compile(r"@[nx](?:\d+|SET)\[([^\]]*)\]")


def test_no_probe_writes_a_set_maps_slot_by_hand():
    """Set maps are written by ADD/TOP (zfsobs/targets/sets.py puts the table's slot in) but for the
    typing of the maps in BEGIN (TYPE_SETS: every key 0, deleted at once)."""
    for name in available():
        text = re.sub(r"// macro TYPE_SETS\n.*?// end macro\n", "", source(name), flags=re.S)
        text = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)          # comments name the keys
        assert [k for k in SET_KEY.findall(text)] == [], name
        if name in fields.KINDS:        # ADD/TOP take a field's name (zfsobs/targets/sets.py), keys no casts
            assert "(uint32)" not in text, name


def test_vdev_queue_names_each_slot_it_writes():
    """vdev_queue keeps its own map sets, but writes a slot as SLOT(field), from the same table."""
    text = source("vdev_queue")
    assert re.findall(r"\$[sk] = SLOT\(", text) and not re.search(r"\$[sk] = (?:\(u?int64\))?\d+;", text)


def test_the_d_twin_of_vdev_queue_names_each_slot_it_writes(tmp_path):
    """OpenZFS 2.2+'s D vdev_queue writes its aggregations' slots as SLOT(field) from the same table
    as the .bt's (zfsobs/targets/d_render.py script_text numbers them), never as numbers; a D script
    of a metric with no table cannot name a slot."""
    path = ROOT / "probes" / "dtrace-openzfs" / "vdev_queue.d"
    text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
    written = re.findall(r"@vq_[nx]\[[^\]]*, ([^,\]]+)\] = ", text)
    assert written and all(w.startswith("SLOT(") or "this->hk" in w for w in written), written
    assert re.findall(r"this->hk = SLOT\((\w+)\)", text) == ["wait_b0", "dev_b0"]
    numbered = script_text(path)
    unseen = fields.VDEV_QUEUE.slot("unseen")
    assert "SLOT(" not in numbered and f"@vq_n[0, this->vd, this->k, {unseen[1]}] = sum((int64_t)1)" in numbered
    stray = tmp_path / "txg.d"
    stray.write_text("BEGIN { @n[SLOT(enq)] = sum(1); }\n")
    with pytest.raises(ZfsobsError, match="field table"):
        script_text(stray)


def test_no_python_file_indexes_counters_by_a_slot_number():
    """Python reads a slot through its kind's table (Kind.slot, its sums and tops), never as a number
    of its own: no stride, no `slot == N`, no `sums[N]`."""
    for path in (ROOT / "zfsobs").rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"\b(?:sums|tops|slots)\[\d+\]|\bslot\s*==\s*\d+|_STRIDE\b|\bget\(\d+, 0\)", text), path


def test_the_models_count_the_tables_fields():
    assert zil.COUNTERS == ("commits", "lat_ns") + fields.ZIL_COUNTS
    assert zil.ITX_TYPES == len(fields.ZIL_ITX) and zil.LAT_BUCKETS == len(fields.ZIL_LAT)
    assert vdev_cache.COUNTERS == fields.VDEV_CACHE_COUNTS
    assert txg.DELAY_BUCKETS == len(fields.THROTTLE_BY_TIME)
    assert set(txg.THROTTLE_SUMS) == set(fields.THROTTLE.sums)
    # every field of a table reaches a line, and every counted field of a line is in its table
    for name, stream in STREAMS.items():
        carried = {f for line in stream.lines.values() for f in line}
        named = {f for f in stream.kind.sums if not f.startswith("unused")} | set(stream.kind.tops) \
            | set(dict(stream.kind.derived))        # an unused slot keeps a run of slots in order
        lat = {f"b{i}" for i in range(fields.ZIL_LAT_SEGMENT)} if name == "zil" else set()
        assert named - carried <= set(fields.ZIL_LAT), name      # zil_lat's buckets are b0..b24 of a seg
        assert carried - named - {"pool", "pid", "txg", "cpu", "final", "late", "seg", "vd", "size", "max",
                                  "bshift", "guid", "path", "dirty_data_max", "delay_min_pct",
                                  "delay_scale"} - lat == set(), name


def _documented(docs: str) -> set[str]:
    """Every `field` a doc names, with `x0`..`x24` ranges written out."""
    out = set(re.findall(r"`(\w+)`", docs))
    for stem, lo, hi in re.findall(r"`([a-z_]+?)(\d+)`\.\.`[a-z_]+?(\d+)`", docs):
        out |= {f"{stem}{i}" for i in range(int(lo), int(hi) + 1)}
    return out


def test_the_docs_name_every_field_of_the_set_probes_lines():
    docs = _documented("".join((ROOT / "docs" / d).read_text() for d in ("events.md", "zil.md", "txg.md",
                                                                          "vdev_cache.md")))
    for stream in STREAMS.values():
        for kind, line in stream.lines.items():
            assert set(line) - docs == set(), kind
