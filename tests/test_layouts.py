"""zfsobs/targets/layouts.py without a kernel: the module's flags read from its release's Kbuild.in, the C it
writes, how it picks among a name's alternatives and reads values back, its cache, and the one-line
errors naming what is missing. A stand-in `make` plays the compiler here (it fails a DEFINE() line
that names an identifier it is told the source lacks, as gcc does); the real compile against
OpenZFS 2.1.11 and Debian's kernel headers, checked against the module's own BTF, is
tests/test_kernel_layouts.py in the kernel lab."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from zfsobs.targets import layouts, probe_files
from zfsobs.targets.offsets import offsets_for, offsets_origin
from zfsobs.errors import ZfsobsError
from zfsobs.targets.target import Target

NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]

# OpenZFS 2.1.11's module/Kbuild.in, the part that sets flags (the rest lists objects)
KBUILD_2_1 = """\
ifneq ($(KERNELRELEASE),)
obj-$(CONFIG_ZFS) := $(ZFS_MODULES)
ZFS_MODULE_CFLAGS += -std=gnu99 -Wno-declaration-after-statement
ZFS_MODULE_CFLAGS += -Wmissing-prototypes
ZFS_MODULE_CFLAGS += @KERNEL_DEBUG_CFLAGS@  @NO_FORMAT_ZERO_LENGTH@
ifneq ($(KBUILD_EXTMOD),)
zfs_include = @abs_top_srcdir@/include
ZFS_MODULE_CFLAGS += -include @abs_top_builddir@/zfs_config.h
ZFS_MODULE_CFLAGS += -I@abs_top_builddir@/include
else
zfs_include = $(srctree)/include/zfs
ZFS_MODULE_CFLAGS += -include $(zfs_include)/zfs_config.h
endif
ZFS_MODULE_CFLAGS += -I$(zfs_include)/os/linux/kernel
ZFS_MODULE_CFLAGS += -I$(zfs_include)/os/linux/spl
ZFS_MODULE_CFLAGS += -I$(zfs_include)/os/linux/zfs
ZFS_MODULE_CFLAGS += -I$(zfs_include)
ZFS_MODULE_CPPFLAGS += -D_KERNEL
ZFS_MODULE_CPPFLAGS += @KERNEL_DEBUG_CPPFLAGS@
ifneq ($(KBUILD_EXTMOD),)
@CONFIG_QAT_TRUE@ZFS_MODULE_CFLAGS += -I@QAT_SRC@/include
endif
subdir-ccflags-y := $(ZFS_MODULE_CFLAGS) $(ZFS_MODULE_CPPFLAGS)
endif
"""

# compiles zfsobs_layouts.c the way gcc would for these tests: a DEFINE() naming an identifier in
# $FAKE_MISSING is an error on its line, any other is emitted with the value $FAKE_VALUES gives
# its expression (else its line number); $FAKE_FAIL is a compile error elsewhere
FAKE_MAKE = r"""#!PYTHON
import json, os, re, sys
workdir = next(a[2:] for a in sys.argv if a.startswith("M="))
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps({"argv": sys.argv[1:], "kbuild": open(workdir + "/Kbuild").read()}) + "\n")
if os.environ.get("FAKE_FAIL"):
    sys.exit(print(os.environ["FAKE_FAIL"], file=sys.stderr) or 2)
missing, values = os.environ.get("FAKE_MISSING", "").split(), json.loads(os.environ.get("FAKE_VALUES", "{}"))
asm, errors = [], []
for n, line in enumerate(open(workdir + "/zfsobs_layouts.c"), 1):
    m = re.match(r"\s*DEFINE\((ZFSOBS_\d+), (.*)\);\t", line)
    if not m:
        continue
    if any(re.search(rf"\b{w}\b", m.group(2)) for w in missing):
        errors.append(f"{workdir}/zfsobs_layouts.c:{n}:20: error: no member or name in {m.group(2)}")
    asm.append(f'\t.ascii "->{m.group(1)} ${values.get(m.group(2), n)} {m.group(2)}"\t#')
if errors:
    sys.exit(print("\n".join(errors), file=sys.stderr) or 2)
open(workdir + "/zfsobs_layouts.s", "w").write("\n".join(asm) + "\n")
"""


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A DKMS-like install for kernel `uname -r`: build tree, zfs source, zfs_config.h; `make` faked."""
    kver = os.uname().release
    build, src, dkms = tmp_path / "build", tmp_path / "src" / "zfs-2.1.11", tmp_path / "dkms"
    build.mkdir()
    (build / "Makefile").write_text("# kernel\n")
    (src / "include" / "sys").mkdir(parents=True)
    (src / "include" / "sys" / "zio.h").write_text("struct zio { int io_vd; };\n")
    (src / "include" / "sys" / "vdev_impl.h").write_text(
        "struct vdev_queue { struct { int vqc_active; } vq_class[10]; };  /* GONE is a macro */\n")
    (src / "module").mkdir()
    (src / "module" / "Kbuild.in").write_text(KBUILD_2_1)
    config = dkms / "2.1.11" / kver / os.uname().machine / "zfs_config.h"
    config.parent.mkdir(parents=True)
    config.write_text("/* #undef ZFS_DEBUG */\n#define HAVE_X 1\n")
    (tmp_path / "srcversion").write_text("ABCDEF0123456789\n")
    monkeypatch.setattr(layouts, "BUILD", str(build))
    monkeypatch.setattr(layouts, "SOURCE", str(tmp_path / "src" / "zfs-{version}"))
    monkeypatch.setattr(layouts, "CONFIGS", (str(dkms / "{version}/{kver}/{arch}/zfs_config.h"),
                                             str(tmp_path / "src/zfs-{version}/{kver}/zfs_config.h")))
    monkeypatch.setattr(layouts, "SRCVERSION", str(tmp_path / "srcversion"))
    monkeypatch.setenv("ZFSOBS_LAYOUTS_CACHE", str(tmp_path / "cache"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "make").write_text(FAKE_MAKE.replace("PYTHON", sys.executable))
    (bindir / "make").chmod(0o755)
    (bindir / "gcc").write_text("#!/bin/sh\n")
    (bindir / "gcc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "make.log"))
    monkeypatch.setattr(layouts, "_MODULES", {})
    return tmp_path


def makes(tree) -> list[dict]:
    log = tree / "make.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_the_module_flags_come_from_its_releases_kbuild_in(tree):
    inputs = layouts.find_inputs("2.1.11")
    src, config = tree / "src" / "zfs-2.1.11", inputs.config
    assert inputs.flags() == ["-std=gnu99", "-include", str(config), f"-I{src}/include",
                              f"-I{src}/include/os/linux/kernel", f"-I{src}/include/os/linux/spl",
                              f"-I{src}/include/os/linux/zfs", f"-I{src}/include", "-D_KERNEL", "-UDEBUG",
                              "-DNDEBUG"]
    # a debug build (configure --enable-debug defines ZFS_DEBUG) has DEBUG set, as its module had
    config.write_text("#define ZFS_DEBUG 1\n")
    assert inputs.flags()[-3:] == ["-D_KERNEL", "-DDEBUG", "-UNDEBUG"]
    # 2.4.4's (trixie-backports' DKMS build): defined only for an in-tree build with CONFIG_ZFS_DEBUG
    config.write_text("/* #undef ZFS_DEBUG */\n#ifdef CONFIG_ZFS_DEBUG\n#define ZFS_DEBUG 1\n#endif\n#define HAVE_X 1\n")
    assert inputs.flags()[-3:] == ["-D_KERNEL", "-UDEBUG", "-DNDEBUG"]
    config.write_text("#define ZFS_DEBUG 1\n")
    # a later release's form: other conditions (KASAN, clang) and the in-tree branch add nothing
    later = KBUILD_2_1.replace("ZFS_MODULE_CPPFLAGS += -D_KERNEL", textwrap.dedent("""\
        ifeq ($(CONFIG_KASAN),y)
        ZFS_MODULE_CFLAGS += -I/kasan-only
        endif
        ZFS_MODULE_CPPFLAGS += -D_KERNEL"""))
    (src / "module" / "Kbuild.in").write_text(later)
    assert "-I/kasan-only" not in inputs.flags() and "-D_KERNEL" in inputs.flags()
    # no Kbuild.in (kmod-devel ships headers only): 2.1's flags
    (src / "module" / "Kbuild.in").unlink()
    assert inputs.flags() == ["-std=gnu99", "-include", str(config), f"-I{src}/include/os/linux/kernel",
                              f"-I{src}/include/os/linux/spl", f"-I{src}/include/os/linux/zfs",
                              f"-I{src}/include", "-D_KERNEL", "-DDEBUG", "-UNDEBUG"]


def test_specs_become_constant_expressions():
    assert layouts._expr("zio.io_vd") == "offsetof(struct zio, io_vd)"
    assert layouts._expr("vdev_queue.vq_class[0].vqc_queued_tree.avl_numnodes") == \
        "offsetof(struct vdev_queue, vq_class[0].vqc_queued_tree.avl_numnodes)"
    assert layouts._expr("stride:vdev_queue.vq_class") == "sizeof(((struct vdev_queue *)0)->vq_class[0])"
    assert layouts._expr("sizeof:zio") == "sizeof(struct zio)"
    assert layouts._expr("enum:ZIO_FLAG_DONT_QUEUE") == "ZIO_FLAG_DONT_QUEUE"
    for bad in ("zio", "enum:A.b", "stride:zio", "zio.io_vd); x(", "zio.a[x]", "other:zio.io_vd"):
        with pytest.raises(ZfsobsError, match="bad spec"):
            layouts._expr(bad)


def test_the_real_table_is_one_define_per_name():
    table = layouts.specs(probe_files.offsets_table())
    assert {"zio.io_vd", "vdev_queue.class_active", "ZIO_FLAG_DONT_QUEUE", "VQ_QUEUED_STRIDE"} <= set(table)
    source, by_line = layouts._source({name: alts[0] for name, alts in table.items()})
    lines = source.splitlines()
    assert len(by_line) == len(table) and all("DEFINE(ZFSOBS_" in lines[n - 1] for n in by_line)
    assert lines[0] == "#include <linux/kbuild.h>" and all(f"#include <{h}>" in lines for h in layouts.HEADERS)


def test_alternatives_the_headers_lack_are_skipped_and_failing_ones_retried(tree, monkeypatch):
    """vq_cactive appears in no header: that alternative is never compiled. GONE does (a comment), so it
    is tried, fails on its line and the next alternative takes its place. NOPE, a name's only spec, is
    compiled as it is, fails, and has none left: left out, as BTF leaves out what it lacks."""
    monkeypatch.setenv("FAKE_MISSING", "GONE NOPE")
    monkeypatch.setenv("FAKE_VALUES", json.dumps({"offsetof(struct zio, io_vd)": 592,
                                                  "offsetof(struct vdev_queue, vq_class[0].vqc_active)": 8,
                                                  "sizeof(struct zio)": -1}))
    table = {"zio.io_vd": ["zio.io_vd"], "vdev_queue.class_active": ["vdev_queue.vq_cactive",
                                                                    "vdev_queue.vq_class[0].vqc_active"],
             "B": ["enum:NOPE"], "C": ["enum:GONE", "sizeof:zio"]}
    got = layouts.compile_layouts(layouts.find_inputs("2.1.11"), table)
    assert got == {"zio.io_vd": 592, "vdev_queue.class_active": 8, "C": -1}
    runs = makes(tree)
    assert len(runs) == 2 and runs[0]["argv"][:3] == ["-s", "-C", str(tree / "build")]
    assert runs[0]["argv"][-1] == "zfsobs_layouts.s" and "obj-m := zfsobs_layouts.o" in runs[0]["kbuild"]
    assert "-D_KERNEL -UDEBUG -DNDEBUG" in runs[0]["kbuild"]


def test_a_compile_error_that_is_no_alternatives_is_one_line(tree, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "In file included from x.c:2:\n/usr/src/zfs/include/sys/zio.h:33:10: "
                                    "fatal error: sys/nope.h: No such file or directory\nmake: *** Error 2")
    with pytest.raises(ZfsobsError) as exc:
        layouts.compile_layouts(layouts.find_inputs("2.1.11"), {"zio.io_vd": ["zio.io_vd"]})
    assert "\n" not in str(exc.value) and "fatal error: sys/nope.h" in str(exc.value), exc.value


def test_compiled_once_per_module_then_cached(tree, monkeypatch):
    monkeypatch.setenv("FAKE_VALUES", json.dumps({"offsetof(struct zio, io_vd)": 592}))
    table = {"zio.io_vd": ["zio.io_vd"]}
    values, inputs, how = layouts.compiled("2.1.11", table)
    assert values == {"zio.io_vd": 592} and how.startswith("compiled in ")
    path = layouts.cache_path(inputs)
    assert path.parent == tree / "cache" and "ABCDEF0123456789" in path.name and os.uname().release in path.name
    assert layouts.compiled("2.1.11", table)[2] == "cached" and len(makes(tree)) == 1
    inputs.config.write_text("#define ZFS_DEBUG 1\n")     # another build of the same source: again
    assert layouts.compiled("2.1.11", table)[2].startswith("compiled") and len(makes(tree)) == 2
    # a cache that cannot be written is no error (doctor runs without root)
    monkeypatch.setenv("ZFSOBS_LAYOUTS_CACHE", "/proc/zfsobs-no-such-dir")
    assert layouts.compiled("2.1.11", table)[0] == {"zio.io_vd": 592}


@pytest.mark.parametrize("break_it,says", [
    (lambda t: (t / "build" / "Makefile").unlink(), f"apt-get install linux-headers-{os.uname().release}"),
    (lambda t: (t / "bin" / "gcc").unlink(), "apt-get install gcc"),
    (lambda t: (t / "src/zfs-2.1.11/include/sys/zio.h").unlink(), "zfs-dkms; RHEL family: kmod-zfs-devel"),
    (lambda t: next((t / "dkms").rglob("zfs_config.h")).unlink(), "dkms install zfs/2.1.11, or RHEL family: kmod-zfs-devel"),
])
def test_what_is_missing_is_named_with_its_package(tree, monkeypatch, break_it, says):
    if says == "apt-get install gcc" and any(os.path.exists(os.path.join(d, "gcc"))
                                             for d in os.environ["PATH"].split(":")[1:]):
        monkeypatch.setenv("PATH", str(tree / "bin"))
    break_it(tree)
    with pytest.raises(layouts.Missing) as exc:
        layouts.find_inputs("2.1.11")
    assert says in str(exc.value) and "\n" not in str(exc.value), exc.value


def test_a_kmod_devel_config_is_found_too(tree):
    next((tree / "dkms").rglob("zfs_config.h")).unlink()
    kmod = tree / "src" / "zfs-2.1.11" / os.uname().release / "zfs_config.h"
    kmod.parent.mkdir()
    kmod.write_text("/* kmod-devel */\n")
    assert layouts.find_inputs("2.1.11").config == kmod


def test_a_kernel_target_says_where_its_layout_came_from(tree, monkeypatch):
    """The order: module BTF, else compiled (and the probes get the values), else one line why."""
    monkeypatch.setenv("FAKE_VALUES", json.dumps({"offsetof(struct zilog, zl_spa)": 56}))
    words = re.findall(r"\w+", json.dumps(layouts.specs(probe_files.offsets_table())))
    (tree / "src/zfs-2.1.11/include/sys/zil_impl.h").write_text(" ".join(words))
    t = Target("kernel", "", "2.1.11")
    offsets = offsets_for(t)
    assert offsets["zilog.zl_spa"] == 56 and t.describe()["layouts"].startswith(
        f"compiled from {tree / 'src' / 'zfs-2.1.11'} against {tree / 'build'}")
    assert re.match(r"compiled from \S+ against \S+ with \S+zfs_config.h \(compiled in \d+ s; \S+\): \d+ fields",
                    offsets_origin(t)), offsets_origin(t)
    monkeypatch.setattr(layouts, "_MODULES", {})
    (tree / "build" / "Makefile").unlink()
    t = Target("kernel", "", "2.1.11")
    assert offsets_for(t) == {}
    assert offsets_origin(t) == (
        f"unknown for kernel 2.1.11: no module BTF, and cannot compile them: no kernel build tree "
        f"{tree / 'build'} (Debian: apt-get install linux-headers-{os.uname().release}); probes that "
        "read struct fields are off")


def _plant(tree, table, monkeypatch):
    """The cache file's name and the name the old code wrote it under first (PATH.PID.tmp)."""
    monkeypatch.setenv("FAKE_VALUES", json.dumps({"offsetof(struct zio, io_vd)": 592}))
    path = layouts.cache_path(layouts.find_inputs("2.1.11"))
    return path, path.with_suffix(f".{os.getpid()}.tmp")


ROOT_AND_SETPRIV = os.geteuid() == 0 and shutil.which("setpriv")


@pytest.mark.skipif(not ROOT_AND_SETPRIV, reason="needs root and setpriv (a real other user)")
def test_a_cache_dir_others_can_write_is_neither_read_nor_written(tree, monkeypatch):
    """`nobody` plants symlinks to a root file at the cache's names in a world-writable cache dir:
    the old code wrote its fixed PATH.PID.tmp through one (the file's content replaced)."""
    table = {"zio.io_vd": ["zio.io_vd"]}
    shared = Path(tempfile.mkdtemp(prefix="zfsobs-test-layouts-"))     # one `nobody` can reach
    try:
        shared.chmod(0o755)
        monkeypatch.setenv("ZFSOBS_LAYOUTS_CACHE", str(shared / "cache"))
        path, old_tmp = _plant(tree, table, monkeypatch)
        path.parent.mkdir()
        path.parent.chmod(0o777)
        victim = tree / "victim"
        victim.write_text("precious\n")
        for name in (path, old_tmp):
            subprocess.run(NOBODY + ["ln", "-s", str(victim), str(name)], check=True, timeout=30)
        values, _, how = layouts.compiled("2.1.11", table)
        assert values == {"zio.io_vd": 592} and "not cached" in how and "writable by others" in how
        assert victim.read_text() == "precious\n" and path.is_symlink() and old_tmp.is_symlink()
    finally:
        shutil.rmtree(shared)


def test_a_planted_symlink_or_a_foreign_file_in_the_cache_is_not_followed(tree, monkeypatch):
    table = {"zio.io_vd": ["zio.io_vd"]}
    path, _ = _plant(tree, table, monkeypatch)
    path.parent.mkdir(mode=0o700)
    victim, forged = tree / "victim", tree / "forged.json"
    victim.write_text("precious\n")
    # a forged entry with the right digest, reached through a symlink: not read, and replaced
    digest = layouts._digest(layouts.find_inputs("2.1.11"), table)
    forged.write_text(json.dumps({"digest": digest, "values": {"zio.io_vd": 4096}}))
    path.symlink_to(forged)
    assert layouts.compiled("2.1.11", table)[0] == {"zio.io_vd": 592} and len(makes(tree)) == 1
    assert not path.is_symlink() and json.loads(path.read_text())["values"] == {"zio.io_vd": 592}
    assert os.stat(path).st_mode & 0o777 == 0o644 and not list(path.parent.glob("*.tmp"))
    if os.geteuid() == 0:      # the same entry as a file another user owns: not read
        path.write_text(forged.read_text())
        os.chown(path, 65534, 65534)
        assert layouts.compiled("2.1.11", table)[0] == {"zio.io_vd": 592} and len(makes(tree)) == 2
    # the cache directory itself a symlink (to a directory of the victim's): not used at all
    path.parent.rename(tree / "moved")
    (tree / "cache").symlink_to(tree / "moved")
    assert "is a symlink" in layouts.compiled("2.1.11", table)[2]
    assert victim.read_text() == "precious\n"


def test_a_new_cache_dir_is_private(tree, monkeypatch):
    monkeypatch.setenv("FAKE_VALUES", json.dumps({"offsetof(struct zio, io_vd)": 592}))
    layouts.compiled("2.1.11", {"zio.io_vd": ["zio.io_vd"]})
    assert (tree / "cache").stat().st_mode & 0o777 == 0o700
