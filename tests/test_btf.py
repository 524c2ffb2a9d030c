"""zfsobs/targets/btf.py against the running kernel's own BTF (/sys/kernel/btf/vmlinux), with bpftool's
dump of the same file as the independent reading: every member offset of hundreds of structs,
members inside anonymous unions, array strides and enumerator values. (Module BTF, e.g. zfs's, is
split BTF continuing vmlinux's ids and strings; it is read the same way in the kernel lab.)"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter

import pytest

from zfsobs.targets.btf import ARRAY, Btf, resolve_table
from zfsobs.errors import ZfsobsError

VMLINUX = "/sys/kernel/btf/vmlinux"
pytestmark = pytest.mark.skipif(not (os.path.exists(VMLINUX) and shutil.which("bpftool")),
                                reason="needs /sys/kernel/btf/vmlinux and bpftool (./scripts/setup)")
TYPE_RE = re.compile(r"^\[(\d+)\] (\w+) '([^']*)'(.*)$")
MEMBER_RE = re.compile(r"^\t'([^']*)' type_id=(\d+) bits_offset=(\d+)( bitfield_size=\d+)?$")
ENUM_RE = re.compile(r"^\t'([^']*)' val=(-?\d+)$")


@pytest.fixture(scope="module")
def dump():
    """bpftool's reading: {id: (kind, name, attrs, [(member, type_id, bits, bitfield)] or enumerators)}."""
    out = subprocess.run(["bpftool", "btf", "dump", "file", VMLINUX], capture_output=True, text=True,
                         check=True).stdout
    types, cur = {}, None
    for line in out.splitlines():
        m = TYPE_RE.match(line)
        if m:
            cur = types[int(m[1])] = (m[2], m[3], m[4], [])
            continue
        m = MEMBER_RE.match(line) or ENUM_RE.match(line)
        if m and cur is not None:
            cur[3].append(m.groups())
    return types


@pytest.fixture(scope="module")
def btf():
    return Btf(VMLINUX)


def test_every_member_offset_of_unique_structs(btf, dump):
    names = Counter(name for kind, name, _, _ in dump.values() if kind == "STRUCT")
    checked = 0
    for tid, (kind, name, _, members) in sorted(dump.items()):
        if kind != "STRUCT" or names[name] != 1 or not name:
            continue
        for member, _, bits, bitfield in members:
            if member == "(anon)" or bitfield or int(bits) % 8:
                continue
            assert btf.offset(f"{name}.{member}")[0] == int(bits) // 8, (name, member)
            checked += 1
    assert checked > 10000, checked


def test_members_inside_anonymous_unions(btf, dump):
    """e.g. a member of an anonymous union inside a struct: anon's offset + its own."""
    checked = 0
    names = Counter(name for kind, name, _, _ in dump.values() if kind == "STRUCT")
    for tid, (kind, name, _, members) in sorted(dump.items()):
        if kind != "STRUCT" or names[name] != 1 or not name:
            continue
        direct = {m for m, *_ in members}
        for member, type_id, bits, bitfield in members:
            inner = dump.get(int(type_id))
            if member != "(anon)" or bitfield or not inner or inner[0] not in ("STRUCT", "UNION"):
                continue
            for m2, _, bits2, bf2 in inner[3]:
                if m2 == "(anon)" or bf2 or m2 in direct or (int(bits) + int(bits2)) % 8:
                    continue
                assert btf.offset(f"{name}.{m2}")[0] == (int(bits) + int(bits2)) // 8, (name, m2)
                checked += 1
        if checked > 2000:
            break
    assert checked > 100, checked


def test_array_strides_and_indexing(btf, dump):
    checked = 0
    for tid, (kind, name, attrs, members) in sorted(dump.items()):
        if kind != "STRUCT" or not name:
            continue
        for member, type_id, bits, bitfield in members:
            arr = dump.get(int(type_id))
            if member == "(anon)" or bitfield or not arr or arr[0] != "ARRAY":
                continue
            try:
                tid_s = btf.struct(name)
            except ZfsobsError:
                continue
            if tid_s != tid:
                continue                      # a duplicate name: btf.struct picks another
            elem = int(re.search(r"type_id=(\d+)", arr[2])[1])
            stride = btf.sizeof(elem)
            assert btf.stride(f"{name}.{member}") == stride
            assert btf.offset(f"{name}.{member}[1]")[0] == int(bits) // 8 + stride
            assert btf._resolve(btf.offset(f"{name}.{member}")[1])[0] == ARRAY
            checked += 1
    assert checked > 500, checked


def test_enumerators_and_the_table(btf, dump):
    enums = {}
    for kind, name, _, items in dump.values():
        if kind in ("ENUM", "ENUM64"):
            for e_name, value in items:
                enums.setdefault(e_name, int(value) & 0xFFFFFFFF if kind == "ENUM" else int(value))
    for e_name in list(enums)[:300]:
        assert btf.enum_value(e_name) & 0xFFFFFFFF == enums[e_name] & 0xFFFFFFFF, e_name
    # the offsets.json "btf" table form: the first alternative this BTF has wins, others are left out
    got = resolve_table(btf, {"a": ["no_such_struct.x", "task_struct.pid"], "b": ["enum:no_such"],
                              "c": ["sizeof:task_struct"], "d": ["stride:task_struct.comm"]})
    pid = next(int(b) // 8 for k, n, _, ms in dump.values() if k == "STRUCT" and n == "task_struct"
               for m, _, b, _ in ms if m == "pid")
    size = next(int(re.search(r"size=(\d+)", a)[1]) for k, n, a, _ in dump.values()
                if k == "STRUCT" and n == "task_struct")
    assert got == {"a": pid, "c": size, "d": 1}


def test_bad_input_is_one_clear_error(tmp_path, btf):
    bad = tmp_path / "x"
    bad.write_bytes(b"\0" * 64)
    with pytest.raises(ZfsobsError, match="not BTF"):
        Btf(str(bad))
    with pytest.raises(ZfsobsError, match="cannot read BTF"):
        Btf(str(tmp_path / "missing"))
    with pytest.raises(ZfsobsError, match="no member"):
        btf.offset("task_struct.no_such_member")
    json.dumps(btf.offset("task_struct.pid"))


def _sections(tmp_path, image):
    """The base and split BTF of the kernel lab's cached zfs.ko (built with BTF): its base is the
    vmlinux's .BTF, or from kernel 6.12 on the module's own distilled base (.BTF.base, which the
    kernel relocates onto vmlinux's at load: /sys/kernel/btf/zfs is split from vmlinux's)."""
    out = []
    heads = subprocess.run(["readelf", "-S", str(image / "zfs.ko")], capture_output=True, text=True).stdout
    base = ("zfs.ko", ".BTF.base") if ".BTF.base" in heads else ("vmlinux", ".BTF")
    for name, section in (base, ("zfs.ko", ".BTF")):
        dest = tmp_path / f"{name}{section}"
        subprocess.run(["objcopy", f"--dump-section={section}={dest}", str(image / name), str(tmp_path / "scratch")],
                       check=True, capture_output=True)
        out.append(str(dest))
    return out


# the kernel lab images whose zfs.ko carries module BTF: bookworm's --btf flavour (2.1.11) and the
# stock trixie builds (2.3.9, 2.4.x: trixie's headers ship vmlinux), with what each release's BTF gives
# for the "btf" table's constants (from 2.2 the ZIO_FLAG_* are macros, not in BTF: compiled instead)
BTF_IMAGES = {
    ("bookworm", "btf"): {"ZIO_FLAG_DONT_QUEUE": 1 << 19, "ZIO_FLAG_DONT_CACHE": 1 << 11, "VQ_ACTIVE_STRIDE": 48,
                          "VQ_QUEUED_STRIDE": 48, "VQ_QUEUED_FIFO": 0, "VQ_QUEUED_FIFO_BACK": 0},
    # 2.2.2 on: per-class active counts in their own uint32 array, FIFO classes (sync read/write,
    # trim: 1 | 2 | 128) in a list counted 24 bytes before where the others' tree keeps its count;
    # a class is 32 bytes in the kernel (libzpool's 40: its avl_tree_t has a pad, its list_t a size)
    ("trixie", "stock"): {"VQ_ACTIVE_STRIDE": 4, "VQ_QUEUED_STRIDE": 32, "VQ_QUEUED_FIFO": 131,
                          "VQ_QUEUED_FIFO_BACK": 24},
    ("trixie-backports", "stock"): {"VQ_ACTIVE_STRIDE": 4, "VQ_QUEUED_STRIDE": 32, "VQ_QUEUED_FIFO": 131,
                                    "VQ_QUEUED_FIFO_BACK": 24},
}


@pytest.mark.parametrize("distro,flavour", list(BTF_IMAGES))
def test_the_zfs_modules_own_btf_gives_every_probe_offset(tmp_path, monkeypatch, distro, flavour):
    """The kernel target's layout, read from a real zfs.ko (a kernel lab image: only where it was
    built, scripts/kernel-lab-image), against bpftool's reading of the same module."""
    from zfsobs.targets import offsets, probe_files
    monkeypatch.setenv("ZFSOBS_LAYOUTS_CACHE", str(tmp_path / "cache"))     # parsed here, not read back
    from zfsobs.labs.guest import builder_command, image_dir
    image = image_dir(flavour=flavour, distro=distro)
    if not (image / "complete").exists():
        pytest.skip(f"no kernel lab image at {image} ({' '.join(builder_command(flavour, distro))} builds it)")
    vmlinux, module = _sections(tmp_path, image)
    got = offsets._module_btf.__wrapped__(module, vmlinux)
    table = json.loads((probe_files.probes_dir() / "offsets.json").read_text())
    names = {f for build in table["libzpool"].values() for f in build.get("fields", {})}
    assert names <= set(got), sorted(names - set(got))
    assert {k: got[k] for k in table["btf"]["constants"] if k in got} == BTF_IMAGES[distro, flavour]
    if distro == "bookworm":
        # 2.1's vdev_queue_class: uint32 vqc_active, then the queued tree (avl_numnodes 24 bytes into it)
        assert got["vdev_queue.class_queued"] == got["vdev_queue.class_active"] + 8 + 24
    else:
        # vq_vdev, then vq_class[9] of 32 bytes (the tree's avl_numnodes 24 bytes in), two offset
        # trees, vq_last_offset, vq_last_prio, vq_cqueued, then vq_cactive[] (include/sys/vdev_impl.h)
        assert got["vdev_queue.class_queued"] == 8 + 24
        assert got["vdev_queue.class_active"] == 8 + 9 * 32 + 2 * 32 + 8 + 4 + 4
    dump = subprocess.run(["bpftool", "btf", "dump", "file", module, "-B", vmlinux],
                          capture_output=True, text=True, check=True).stdout
    members, cur = {}, None
    for line in dump.splitlines():
        m = TYPE_RE.match(line)
        if m:
            cur = m[3] if m[2] == "STRUCT" and m[3] in ("zio", "vdev", "zilog", "lwb", "itx", "dsl_pool") else None
            continue
        m = MEMBER_RE.match(line)
        if cur and m:
            members.setdefault(f"{cur}.{m[1]}", int(m[3]) // 8)
    direct = {name: off for name, off in got.items() if name in members}
    assert len(direct) >= 15 and all(members[n] == off for n, off in direct.items()), (direct, members)


def test_the_modules_btf_is_parsed_once_and_read_back_after(tmp_path, monkeypatch):
    """_module_btf keeps what it found under a digest of both BTFs and the table (seconds a process,
    a minute under emulation): a second process reads it, and a damaged or foreign file is parsed again. The
    host's vmlinux BTF stands for both here (it has no zfs module)."""
    from zfsobs.targets import offsets
    monkeypatch.setenv("ZFSOBS_LAYOUTS_CACHE", str(tmp_path))
    vmlinux = "/sys/kernel/btf/vmlinux"
    if not os.path.exists(vmlinux):
        pytest.skip("no kernel BTF here")
    first = offsets._module_btf.__wrapped__(vmlinux, vmlinux)
    kept = list(tmp_path.glob("btf-*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text()) == first
    def parse(*_):
        raise AssertionError("parsed again")
    monkeypatch.setattr(offsets, "resolve_table", parse)
    assert offsets._module_btf.__wrapped__(vmlinux, vmlinux) == first
    kept[0].write_text("{not json")
    monkeypatch.undo()
    monkeypatch.setenv("ZFSOBS_LAYOUTS_CACHE", str(tmp_path))
    assert offsets._module_btf.__wrapped__(vmlinux, vmlinux) == first
    assert json.loads(kept[0].read_text()) == first
