"""Kernel struct layouts where the zfs module has no BTF (stock DKMS or kmod builds): compiled, never
loaded, from the installed zfs source against the running kernel's build tree.

A small kbuild object holds one kbuild asm-offsets DEFINE() per OFF()/CONST() name the probes use
(the names of probes/offsets.json's "btf" table, with the same alternatives: a member path, "stride:",
"sizeof:", "enum:", "gap:", "if:", "value:"). `make -C /lib/modules/<kver>/build M=DIR zfsobs_layouts.s` compiles it with the
kernel's own flags plus the module's flags of that release (module/Kbuild.in: -include zfs_config.h,
its include dirs, -D_KERNEL, the debug defines its configure chose), and each value is read back
from the generated assembly. What it needs is what a DKMS install keeps: /usr/src/zfs-<ver>/, the
zfs_config.h dkms copies to /var/lib/dkms/zfs/<ver>/<kver>/<arch>/ (kmod-devel: /usr/src/zfs-<ver>/
<kver>/), the kernel headers, gcc and make. The result is cached per module (srcversion + kernel
release) in /var/cache/zfsobs/layouts (ZFSOBS_LAYOUTS_CACHE moves it); docs/kernel-lab.md.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from zfsobs.errors import ZfsobsError
from zfsobs.targets.cache_files import private_dir, read_trusted, write_atomic

CACHE = "/var/cache/zfsobs/layouts"
# where a DKMS or kmod-devel install keeps what a compile needs ({kver}, {version}, {arch})
BUILD = "/lib/modules/{kver}/build"
SOURCE = "/usr/src/zfs-{version}"
CONFIGS = ("/var/lib/dkms/zfs/{version}/{kver}/{arch}/zfs_config.h", "/usr/src/zfs-{version}/{kver}/zfs_config.h")
SRCVERSION = "/sys/module/zfs/srcversion"
HEADERS = ("sys/zio.h", "sys/vdev_impl.h", "sys/zil_impl.h", "sys/dsl_pool.h", "sys/dmu_tx.h")
GENERATOR = "1"           # part of the cache check: a change to the C or its reading compiles again
COMPILE_TIMEOUT = 1200    # one make; minutes under the kernel lab's TCG
_SPEC_RE = re.compile(r"^(?:(stride|sizeof|enum):)?([A-Za-z_]\w*)((?:\.[A-Za-z_]\w*(?:\[\d+\])?)*)$")
_DEFINE_RE = re.compile(r'\.ascii\s+"->ZFSOBS_(\d+)\s+[$#]?(-?\d+)\s')
# module/Kbuild.in's flags as of 2.1, for a source tree without it (kmod-devel ships headers only)
_DEFAULT_KBUILD = """ZFS_MODULE_CFLAGS += -std=gnu99
ZFS_MODULE_CFLAGS += -include @abs_top_builddir@/zfs_config.h
ZFS_MODULE_CFLAGS += -I$(zfs_include)/os/linux/kernel -I$(zfs_include)/os/linux/spl
ZFS_MODULE_CFLAGS += -I$(zfs_include)/os/linux/zfs -I$(zfs_include)
ZFS_MODULE_CPPFLAGS += -D_KERNEL @KERNEL_DEBUG_CPPFLAGS@
"""


class Missing(ZfsobsError):
    """What is missing to compile the layouts, and the package that provides it (one line)."""


def specs(table: dict) -> dict[str, list[str]]:
    """Every OFF()/CONST() name the kernel target looks up, with its alternatives (first that the
    module has wins): the fields of every libzpool build and the "btf" table's constants."""
    names = {f for build in table["libzpool"].values() for f in build.get("fields", {})}
    fields = {name: table["btf"]["fields"].get(name, [name]) for name in sorted(names)}
    return {**fields, **table["btf"]["constants"]}


@dataclass(frozen=True)
class Inputs:
    """What one compile reads: the module's release and source, its zfs_config.h, the kernel tree."""
    version: str
    kver: str
    build: Path
    src: Path
    config: Path
    srcversion: str

    def flags(self) -> list[str]:
        """The module's own compile flags for its release (the external-module branch of its
        module/Kbuild.in), reduced to what shapes a layout: -std, -include, -I, -D, -U."""
        try:
            text = (self.src / "module" / "Kbuild.in").read_text()
        except OSError:
            text = _DEFAULT_KBUILD
        # 2.4's zfs_config.h also defines ZFS_DEBUG inside `#ifdef CONFIG_ZFS_DEBUG`, for an in-tree
        # build with that kernel option: an external (DKMS, kmod) build is debug only unconditionally
        config = re.sub(r"^#ifdef CONFIG_\w+\n.*?^#endif", "", self.config.read_text(errors="replace"),
                        flags=re.M | re.S)
        debug = re.search(r"^#define ZFS_DEBUG\b", config, re.M)
        subst = {"@abs_top_srcdir@": str(self.src), "@abs_top_builddir@": str(self.src),
                 "@abs_srcdir@": str(self.src / "module"), "@abs_builddir@": str(self.src / "module"),
                 "$(zfs_include)": str(self.src / "include"),
                 "@KERNEL_DEBUG_CPPFLAGS@": "-DDEBUG -UNDEBUG" if debug else "-UDEBUG -DNDEBUG"}
        cflags, cppflags, taken = [], [], [True]
        for line in text.splitlines():
            words = line.split()
            if not words:
                continue
            if words[0] in ("ifeq", "ifneq", "ifdef", "ifndef"):
                # true for a kbuild external module; any other condition's lines are left out
                known = line.replace(" ", "") in ("ifneq($(KBUILD_EXTMOD),)", "ifneq($(KERNELRELEASE),)")
                taken.append(taken[-1] and known)
            elif words[0] == "else" and len(taken) > 1:
                taken[-1] = False
            elif words[0] == "endif" and len(taken) > 1:
                taken.pop()
            elif taken[-1] and len(words) > 2 and words[1] == "+=" and \
                    words[0] in ("ZFS_MODULE_CFLAGS", "ZFS_MODULE_CPPFLAGS"):
                value = line.split("+=", 1)[1]
                for key, repl in subst.items():
                    value = value.replace(key, repl)
                (cflags if words[0].endswith("_CFLAGS") else cppflags).extend(value.split())
        out, words = [], cflags + cppflags
        for i, word in enumerate(words):
            if "@" in word or "$(" in word:
                continue                           # a configure value of no layout concern
            if word == "-include" and i + 1 < len(words):
                target = words[i + 1]
                out += ["-include", str(self.config) if target.endswith("/zfs_config.h") else target]
            elif word.startswith(("-std=", "-I", "-D", "-U")) and (i == 0 or words[i - 1] != "-include"):
                out.append(word)
        return out


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def find_inputs(version: str) -> Inputs:
    """The running kernel's build tree and the installed zfs source of `version`, or Missing."""
    kver, arch = os.uname().release, os.uname().machine
    build = Path(BUILD.format(kver=kver))
    if not (build / "Makefile").is_file():
        raise Missing(f"no kernel build tree {build} (Debian: apt-get install linux-headers-{kver})")
    for tool, package in (("make", "make"), ("gcc", "gcc")):
        if not shutil.which(tool):
            raise Missing(f"no {tool} to compile them with (Debian: apt-get install {package})")
    src = Path(SOURCE.format(version=version))
    if not (src / "include" / "sys" / "zio.h").is_file():
        raise Missing(f"no zfs {version} source in {src} (Debian: zfs-dkms; RHEL family: kmod-zfs-devel)")
    configs = [Path(c.format(version=version, kver=kver, arch=arch)) for c in CONFIGS]
    config = next((c for c in configs if c.is_file()), None)
    if config is None:
        raise Missing(f"no zfs_config.h of zfs {version} for kernel {kver} (looked in {configs[0]} "
                      f"and {configs[1]}; dkms keeps it once it has built zfs for this kernel: "
                      f"dkms install zfs/{version}, or RHEL family: kmod-zfs-devel)")
    srcversion = _read(SRCVERSION) or "unknown"
    return Inputs(version, kver, build, src, config, srcversion)


def _expr(spec: str) -> str:
    """A spec of offsets.json's "btf" table as a C constant expression."""
    kind, _, arg = spec.partition(":")
    if kind == "gap":
        first, _, second = arg.partition("-")
        return f"({_expr(first)} - {_expr(first.split('.')[0] + '.' + second)})"
    if kind == "value" and re.fullmatch(r"-?\d+", arg):
        return arg
    if kind == "if" and re.fullmatch(r"[\w.\[\]]+=-?\d+", arg):
        path, _, value = arg.partition("=")       # compiles only where the member exists
        return f"(0 * sizeof(((struct {path.split('.')[0]} *)0)->{path.partition('.')[2]}) + {value})"
    m = _SPEC_RE.match(spec)
    if not m:
        raise ZfsobsError(f"layouts: bad spec {spec!r}")
    kind, struct, path = m.group(1), m.group(2), m.group(3).lstrip(".")
    if kind == "enum" and not path:
        return struct
    if kind == "sizeof" and not path:
        return f"sizeof(struct {struct})"
    if kind == "stride" and path:
        return f"sizeof(((struct {struct} *)0)->{path}[0])"
    if kind is None and path:
        return f"offsetof(struct {struct}, {path})"
    raise ZfsobsError(f"layouts: bad spec {spec!r}")


def _words(src: Path) -> set[str]:
    """Every identifier in the source's headers, for the cheap check that a spec's exist at all."""
    return {w for p in sorted((src / "include").rglob("*.h"))
            for w in re.findall(r"[A-Za-z_]\w*", p.read_text(errors="replace"))}


def _plausible(spec: str, words: set[str]) -> bool:
    """False when an identifier of the spec appears in no header: that alternative cannot compile
    (a make costs a minute under the kernel lab's TCG; the compiler stays the judge of the rest)."""
    idents = re.findall(r"[A-Za-z_]\w*", spec.partition(":")[2] if ":" in spec else spec)
    return all(ident in words for ident in idents)


def _source(chosen: dict[str, str]) -> tuple[str, dict[int, str]]:
    """The C file, and which name each DEFINE line is for (compiler errors name lines)."""
    head = ["#include <linux/kbuild.h>", *[f"#include <{h}>" for h in HEADERS],
            "void zfsobs_layouts(void);", "void zfsobs_layouts(void)", "{"]
    lines, by_line = list(head), {}
    for i, (name, spec) in enumerate(chosen.items()):
        lines.append(f"\tDEFINE(ZFSOBS_{i}, {_expr(spec)});\t/* {name} = {spec} */")
        by_line[len(lines)] = name
    return "\n".join(lines + ["}", ""]), by_line


def _make(inputs: Inputs, workdir: Path, source: str) -> tuple[int, str]:
    (workdir / "Kbuild").write_text("obj-m := zfsobs_layouts.o\nccflags-y := "
                                    + " ".join(inputs.flags()) + "\n")
    (workdir / "zfsobs_layouts.c").write_text(source)
    (workdir / "zfsobs_layouts.s").unlink(missing_ok=True)
    try:
        res = subprocess.run(["make", "-s", "-C", str(inputs.build), f"M={workdir}", "zfsobs_layouts.s"],
                             capture_output=True, text=True, timeout=COMPILE_TIMEOUT,
                             env={**os.environ, "LC_ALL": "C"})
    except subprocess.TimeoutExpired:
        raise ZfsobsError(f"compiling the struct layouts took over {COMPILE_TIMEOUT} s") from None
    return res.returncode, res.stdout + res.stderr


def compile_layouts(inputs: Inputs, table: dict[str, list[str]]) -> dict[str, int]:
    """{name: value} for every name one of whose alternatives the source has (as btf.resolve_table):
    a failing alternative costs one more compile, with the next one in its place."""
    words = _words(inputs.src)
    todo = {name: [s for s in alts if _plausible(s, words)] for name, alts in table.items()}
    with tempfile.TemporaryDirectory(prefix="zfsobs-layouts-") as tmp:
        workdir = Path(tmp)
        while True:
            chosen = {name: alts[0] for name, alts in todo.items() if alts}
            if not chosen:
                return {}
            source, by_line = _source(chosen)
            rc, out = _make(inputs, workdir, source)
            if rc == 0:
                break
            errors = [(int(m.group(1)), m.group(0)) for m in
                      re.finditer(r"^\S*zfsobs_layouts\.c:(\d+):\d+: (?:fatal )?error: .*$", out, re.M)]
            failed = {by_line.get(line) for line, _ in errors}
            if not errors or None in failed:     # not an alternative the release lacks: say why
                lines = [e for line, e in errors if line not in by_line] + \
                    [l for l in out.splitlines() if "rror" in l] + out.strip().splitlines()[-1:]
                why = lines[0].strip() if lines else f"make exited {rc}"
                raise ZfsobsError(f"compiling the struct layouts against {inputs.build} failed: {why}")
            for name in failed:
                todo[name] = todo[name][1:]
        asm = (workdir / "zfsobs_layouts.s").read_text()
    values = {int(i): int(v) for i, v in _DEFINE_RE.findall(asm)}
    names = list(chosen)
    if set(values) != set(range(len(names))):
        raise ZfsobsError("compiling the struct layouts: the assembly lacks some of its DEFINE()s")
    return {names[i]: v for i, v in values.items()}


def _digest(inputs: Inputs, table: dict[str, list[str]]) -> str:
    """What a cached result depends on beyond its key: the config, the flags, the specs, this code."""
    blob = json.dumps([GENERATOR, inputs.config.read_text(errors="replace"), inputs.flags(), table,
                       str(inputs.src)], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def cache_path(inputs: Inputs) -> Path:
    cache = Path(os.environ.get("ZFSOBS_LAYOUTS_CACHE") or CACHE)
    return cache / f"zfs-{inputs.version}-{inputs.srcversion}-{inputs.kver}.json"


def compiled(version: str, table: dict[str, list[str]]) -> tuple[dict[str, int], Inputs, str]:
    """(values, inputs, "cached" | "compiled in N s"): from the cache when its inputs match, else
    compiled now and cached. A cache that cannot be written is skipped (doctor runs without root);
    one another user could write (cache_files.private_dir) is neither read nor written."""
    inputs = find_inputs(version)
    path, digest = cache_path(inputs), _digest(inputs, table)
    cache, why = private_dir(path.parent)
    try:
        entry = json.loads(read_trusted(path) or "null") if cache else None
        if entry.get("digest") == digest:
            return {k: int(v) for k, v in entry["values"].items()}, inputs, "cached"
    except (ValueError, KeyError, AttributeError, TypeError):
        pass
    t0 = time.monotonic()
    values = compile_layouts(inputs, table)
    took = time.monotonic() - t0
    how = f"compiled in {took:.0f} s" + (f"; not cached: {why}" if why else "")
    if cache:
        try:
            write_atomic(path, json.dumps({"digest": digest, "values": values, "src": str(inputs.src),
                                           "config": str(inputs.config), "build": str(inputs.build),
                                           "flags": inputs.flags(), "seconds": round(took, 1)}, indent=1) + "\n")
        except OSError:
            pass
    return values, inputs, how


_MODULES: dict[str, tuple[dict[str, int], str]] = {}


def module_layouts(version: str, table: dict[str, list[str]]) -> tuple[dict[str, int], str]:
    """(values, where they came from) for the loaded zfs module without BTF, once per process;
    ({}, why not: one line naming what is missing) when they cannot be compiled here."""
    if version not in _MODULES:
        try:
            values, inputs, how = compiled(version, table)
            _MODULES[version] = values, (f"compiled from {inputs.src} against {inputs.build} with "
                                         f"{inputs.config} ({how}; {cache_path(inputs)})")
        except ZfsobsError as exc:
            _MODULES[version] = {}, f"no module BTF, and cannot compile them: {exc}"
    return _MODULES[version]
