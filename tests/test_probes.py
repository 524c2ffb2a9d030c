"""Rendering probe scripts for targets, and bpftrace accepting what we render."""
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import lab_ready
from zfsobs.errors import ZfsobsError
from zfsobs.targets import render as probes
from zfsobs.targets.render import available, map_keys, render, required_functions, source
from zfsobs.targets.sets import SETS
from zfsobs.targets.target import Target, find_libraries, libzpool

TXG_FUNCS = {"spa_sync", "spa_txg_history_add", "spa_txg_history_set", "spa_txg_history_init_io",
             "spa_txg_history_fini_io"}
PLACEHOLDER = re.compile(r"\b(ENTRY|RETURN|OFF|CREATE_SUM)\(|\bPROC\b|\bTARGET\b")


def kernel_target(functions, version="2.1.11"):
    """A kernel target whose symbol table is given (no zfs module on these machines); the
    kernel path itself is exercised for real in the kernel lab."""
    t = Target("kernel", "", version)
    t.__dict__["symbols"] = {f: ("func", 0xffffffffc0100000 + 64 * i) for i, f in enumerate(functions)}
    t.__dict__["symbols"]["zfs_vdev_max_active"] = ("data", 0xffffffffc0200040)
    return t


def code_lines(text):
    return [l for l in text.splitlines() if not l.lstrip().startswith(("/*", "*", "//"))]


def compiles(text, tmp_path):
    """bpftrace's own dry run (--emit-elf): parses, type-checks and generates BPF, attaches nothing."""
    if not shutil.which("bpftrace") or os.geteuid() != 0:
        pytest.skip("needs root and bpftrace")
    script = tmp_path / "p.bt"
    script.write_text(text)
    res = subprocess.run(["bpftrace", "--emit-elf", str(tmp_path / "p.elf"), str(script)],
                         capture_output=True, text=True, timeout=120)
    errors = [l for l in res.stderr.splitlines() if "ERROR" in l and "RLIMIT_MEMLOCK" not in l]
    assert res.returncode == 0 and not errors, res.stderr


def test_every_script_has_the_documented_header():
    for name in available():
        text = source(name)
        assert text.startswith("/*\n * " + name + ".bt - "), name
        assert "Probes:" in text and "Overhead:" in text and required_functions(text), name


@pytest.mark.skipif(not find_libraries(), reason="needs an installed libzpool")
def test_libzpool_rendering_is_complete_and_compiles(tmp_path):
    target = libzpool()
    r = render("txg", target)
    assert f"uprobe:{target.path}:spa_sync" in r.text and f"uretprobe:{target.path}:spa_sync" in r.text
    assert not any(PLACEHOLDER.search(l) for l in code_lines(r.text))
    assert set(r.functions) == TXG_FUNCS and r.dropped == []
    assert "+ 528 +" in r.text          # dp_dirty_pertxg for this build, from probes/offsets.json
    compiles(r.text, tmp_path)


def test_kernel_rendering_uses_kprobes_and_marks_unknown_offsets(tmp_path):
    r = render("txg", kernel_target(TXG_FUNCS))
    code = "\n".join(code_lines(r.text))
    assert "kprobe:spa_sync" in code and "kretprobe:spa_sync" in code and "uprobe" not in code
    assert "@txg_dirty[0, arg0, arg1] = 0;" in r.text      # unknown layout -> dirty reads -1
    assert any("dp_dirty_pertxg unknown" in d for d in r.dropped)
    assert not any(PLACEHOLDER.search(l) for l in code_lines(r.text))
    compiles(r.text, tmp_path)


def test_a_missing_optional_function_drops_its_block(tmp_path):
    r = render("txg", kernel_target(TXG_FUNCS - {"spa_txg_history_add"}))
    assert "spa_txg_history_add" not in "\n".join(code_lines(r.text))
    assert "function spa_txg_history_add absent" in r.dropped
    compiles(r.text, tmp_path)


def test_a_missing_required_function_is_a_clear_error():
    with pytest.raises(ZfsobsError, match="spa_sync not in this ZFS build"):
        render("txg", kernel_target(TXG_FUNCS - {"spa_sync"}))


def test_unknown_probe_name():
    with pytest.raises(ZfsobsError, match="no probe script 'nope'"):
        source("nope")


ZIL_FUNCS = {"zil_commit_impl", "zil_itx_assign", "zil_lwb_add_block", "spa_sync", "txg_sync_stop"}


SET_PROBES = {"zil": (ZIL_FUNCS, ("lat_ns", "lwb_ge32k", "txother", "lat_max_ns"), "$spa, $txg"),
              "throttle": ({"dmu_tx_assign", "dmu_tx_wait", "spa_sync", "txg_sync_stop"},
                           ("delays", "wait_ns", "dirty_max", "delay_max_ns"), "$spa, $txg"),
              "vdev_cache": ({"vdev_cache_read", "zio_vdev_delegated_io", "vdev_free"},
                             ("reads", "hits", "declined_bytes"), "$vd, $g")}


@pytest.mark.skipif(not find_libraries(), reason="needs an installed libzpool")
@pytest.mark.parametrize("name", sorted(SET_PROBES))
def test_a_set_probe_renders_its_map_sets_from_the_field_table_and_compiles(name, tmp_path):
    """zil, throttle and vdev_cache count into bpftrace's per-CPU maps (probes/linux/sets.btm): no
    loop over CPUs, every slot from zfsobs/fields.py, each set written out, each map sized by the
    probe's Map keys line, and the stop probe has no flag to set."""
    from zfsobs.fields import KINDS
    from zfsobs.sources.stop_marker import StopMarker
    functions, fields, keys = SET_PROBES[name]
    kind = KINDS[name]
    r = render(name, libzpool())
    code = "\n".join(code_lines(r.text))
    assert set(r.functions) == functions and r.dropped == []
    assert "while ($c" not in code and "macro" not in r.text and "SET" not in code
    assert "ADD(" not in code and "TOP(" not in code and "EPOCH" not in code
    assert all(f"print(@n{s})" in code for s in range(3))
    assert all(f"@x{s}[" in code for s in range(3)) == bool(kind.tops)
    for field in fields:
        which, slot = kind.slot(field)
        assert f"@{which}0[pid, {keys}, (uint64){slot}]" in code, field
    assert r.map_keys == map_keys(source(name)) == 4096
    for field, _ in kind.derived:       # a sum of counted fields is not counted again
        assert field not in kind.sums and f", {field}, " not in "\n".join(code_lines(source(name))), field
    assert not any(PLACEHOLDER.search(l) for l in code_lines(r.text))
    stop = StopMarker().probe(r.text)
    assert "@stopping" not in stop
    compiles(r.text + stop, tmp_path)


@pytest.mark.skipif(not find_libraries(), reason="needs an installed libzpool")
def test_zil_writes_its_histogram_bucket_as_an_offset_from_the_tables_slot():
    from zfsobs.fields import ZIL
    code = "\n".join(code_lines(render("zil", libzpool()).text))
    assert f"(uint64)({ZIL.slot('lat_b0')[1]} + $bucket)" in code
    assert "+ 144)" in code and "+ 148)" in code             # lwb_nused / lwb_sz of 2.1.11
    assert code.count('printf("zfsobs 1 set_close') == 1


def test_zil_without_the_struct_layout_is_unavailable_not_fatal():
    with pytest.raises(ZfsobsError, match="struct layout of kernel 2.1.11 unknown"):
        render("zil", kernel_target(ZIL_FUNCS))
    if not shutil.which("bpftrace") or os.geteuid() != 0:
        pytest.skip("the source checks for root and bpftrace")
    from zfsobs.sources.bpftrace import BpftraceSource
    src = BpftraceSource(kernel_target(TXG_FUNCS | ZIL_FUNCS), ("txg", "zil"))
    assert [r.name for r in src.rendered] == ["txg"] and "zil" in src.meta["unavailable"]


VQ_FUNCS = {"vdev_queue_io", "vdev_queue_io_done", "zio_vdev_io_reissue", "zio_vdev_io_bypass",
            "zio_vdev_delegated_io", "vdev_queue_change_io_priority", "vdev_free"}


@pytest.mark.skipif(not find_libraries(), reason="needs an installed libzpool")
def test_vdev_queue_reads_tunables_through_the_librarys_got_and_compiles(tmp_path):
    lib = libzpool()
    r = render("vdev_queue", lib)
    code = "\n".join(code_lines(r.text))
    assert set(r.functions) == VQ_FUNCS and r.dropped == []
    assert not any(PLACEHOLDER.search(l) for l in code_lines(r.text))
    assert "GLOBAL" not in code and "CONST" not in code and "DEPTH" not in code and "ISSUE" not in code
    # every tunable is read through its GOT slot, relative to the probed function's own address
    slot = lib.got_slots["zfs_vdev_async_write_max_active"]
    assert f"+ {slot:#x}))" in code
    assert all(f"reg(\"ip\") - {lib.symbols[fn][1]:#x}" in code for fn in ("vdev_queue_io", "vdev_queue_io_done"))
    if lib.version == "2.1.11":
        assert "& 524288" in code and "+ 592)" in code     # ZIO_FLAG_DONT_QUEUE, zio->io_vd
    compiles(r.text, tmp_path)


@pytest.mark.skipif(not find_libraries(), reason="needs an installed libzpool")
def test_vdev_queue_makes_each_sum_key_first_only_where_bpftrace_drops_a_racing_sum():
    # bpftrace 0.20.0-0.23.2 drop a sum() whose key another CPU made meanwhile (bpftrace#4068); 0.23.2
    # is Debian 13's. There each of ADD's sums is preceded by a 0 that makes the key.
    lib = libzpool()
    made = {v: "\n".join(code_lines(render("vdev_queue", lib, v).text)).count("= sum((int64)0);")
            for v in ("v0.17.0", "0.19.1", "v0.20.0", "0.23.2", "v0.23.3", "0.24.0", "v0.27.1", "", "unknown")}
    sums = "\n".join(code_lines(render("vdev_queue", lib).text)).count("= sum((int64)$v);")
    assert sums > 0 and made == {"v0.17.0": 0, "0.19.1": 0, "v0.20.0": sums, "0.23.2": sums, "v0.23.3": 0,
                                 "0.24.0": 0, "v0.27.1": 0, "": 0, "unknown": 0}


def test_vdev_queue_on_the_kernel_uses_kallsyms_addresses_but_needs_the_layout():
    with pytest.raises(ZfsobsError, match="struct layout of kernel 2.1.11 unknown"):
        render("vdev_queue", kernel_target(VQ_FUNCS))
    assert kernel_target(VQ_FUNCS).global_address("zfs_vdev_max_active", "vdev_queue_io") == "0xffffffffc0200040"
    assert kernel_target(VQ_FUNCS).global_address("zfs_no_such_tunable", "vdev_queue_io") is None


def test_kernel_symbols_are_the_zfs_modules_lines_of_kallsyms(tmp_path):
    """Only the lines from the module's first to its last are split (they come together); the
    result is every line's: this machine's kallsyms with a module's lines put in its middle."""
    from zfsobs.targets.target import _kernel_symbols
    text = open("/proc/kallsyms").read()
    mid = text.index("\n", len(text) // 2) + 1
    zfs = "".join(f"ffffffffc0{i:06x} {'tTdbUr'[i % 6]} zfs_fn_{i}\t[zfs]\n" for i in range(600))
    path = tmp_path / "kallsyms"
    path.write_text(text[:mid] + zfs + "ffffffffc1000000 t spl_fn\t[spl]\n" + text[mid:] +
                    "ffffffffc2000000 T zfs_last\t[zfs]")
    every = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[3] == "[zfs]" and parts[1] in "TtDdBbRr":
            every[parts[2]] = ("func" if parts[1] in "Tt" else "data", int(parts[0], 16))
    assert _kernel_symbols(str(path)) == every and len(every) == 501 and every["zfs_last"][0] == "func"
    assert _kernel_symbols(str(tmp_path / "none")) == {}


def test_no_probe_loops_over_cpus_or_states_a_cpu_limit():
    """Every probe counts in maps no program walks (bpftrace's per-CPU aggregations), so none has a
    CPU count in it, a Max CPUs line, or a loop over CPUs; zfsobs refuses none for its CPUs."""
    for name in available():
        text = source(name)
        assert "NCPU" not in text and "Max CPUs" not in text and "while ($c" not in text, name
    assert not hasattr(probes, "max_cpus") and not hasattr(probes, "possible_cpus")


def test_no_probe_deletes_a_key_of_a_map_printed_while_probes_run():
    """bpftrace 0.17 prints or clears a map key by key and stops ("failed to look up elem: -2") when
    a probe deletes a key under it: a CI run lost its vdev queue recording so, 14 s in. So a map the
    timer prints or clears is never deleted from by a probe; BEGIN and END run with no probe attached."""
    for name in available():
        text = probes.expand_sets(probes._expand_macros(source(name)), probes.kind_of(name))
        printed, deleted = set(), {}
        for block in probes._blocks(text):
            code = "\n".join(code_lines("\n".join(block)))
            head = code.strip().split("\n", 1)[0] if code.strip() else ""
            if head.startswith("interval:"):
                printed |= set(re.findall(r"\b(?:print|clear|zero)\((@\w+)", code))
            elif head and head not in ("BEGIN", "END"):
                for m in re.findall(r"\bdelete\((@\w+)", code):
                    deleted.setdefault(m, head)
        assert not printed & set(deleted), (name, {m: deleted[m] for m in printed & set(deleted)})
        if name == "vdev_queue":
            assert {"@vq_n0", f"@vq_x{SETS - 1}", "@vq_lma"} <= printed, printed
