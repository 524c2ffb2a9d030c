"""Probe scripts: find them, and render one for a target.

A script in probes/linux/ is written once with placeholders:
  ENTRY(fn) / RETURN(fn)   the probe on function entry / return (uprobe on a libzpool path, or kprobe)
  PROC                     the process key (pid for userland, 0 for the kernel)
  TARGET                   the target kind, for the hello line
  OFF(struct.field)        a struct offset for this build (probes/offsets.json "fields")
  CONST(NAME)              a flag value for this build (probes/offsets.json "constants")
  GLOBAL(symbol)           the run-time address of a ZFS global (a tunable); only in ENTRY() probes
  ADD / TOP / EPOCH; and `// each SET in sets`   counting in map sets (zfsobs/targets/sets.py,
                           probes/linux/sets.btm), slots from the probe's field table
  CREATE_SUM(@map[key]);   the key of a sum() map made with a 0 first, on the bpftrace versions that
                           lose a sum when another CPU made its key meanwhile; elsewhere nothing
  NAME;                    the lines between "// macro NAME" and "// end macro" (bpftrace 0.17
                           has no functions; a flush is written once and used twice)
  // include FILE.btm      that file of the same directory, in place (macros kept apart)
A statement whose OFF() this build lacks is replaced by the statement after its
"// without offsets:" comment (which makes the value read as unavailable, -1), or left out.
A probe block on a function the target lacks is left out, unless the header lists it under
"Requires:", which makes the whole script unavailable on that target (its "Absent:" line says
why, if the feature is gone from later releases); so does an offset listed under "Requires offsets:"
that this build lacks. The header's "Map keys: N" sizes each of the script's maps (MAP_KEYS
without one): bpftrace makes every map that large, and a per-CPU one (sum(), max()) takes
N x 8 bytes on each possible CPU (docs/performance.md, "CPU count and memory").
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from zfsobs.errors import FeatureAbsent, ZfsobsError
from zfsobs.targets.names import script_int
from zfsobs.targets.offsets import offsets_for
from zfsobs.targets.probe_files import probes_dir
from zfsobs.targets.sets import expand as expand_sets, kind_of
from zfsobs.targets.target import Target

_PROBE_RE = re.compile(r"\b(ENTRY|RETURN)\((\w+)\)")
_OFF_RE = re.compile(r"\b(?:OFF|CONST)\(([\w.]+)\)")
_GLOBAL_RE = re.compile(r"\bGLOBAL\((\w+)\)")
_FALLBACK = "// without offsets:"
_INCLUDE_RE = re.compile(r"^// include ([\w.-]+\.btm)$", re.M)
_MACRO_RE = re.compile(r"^// macro (\w+)\n(.*?)^// end macro\n", re.M | re.S)
_CREATE_SUM_RE = re.compile(r"^(\s*)CREATE_SUM\((@\w+\[.*\])\);\n", re.M)
# bpftrace 0.20.0 to 0.23.2 add a sum() to a key not in the map yet with an update that fails if
# another CPU made the key meanwhile (BPF_NOEXIST), and drop the value (bpftrace#4068, fixed in
# 0.23.3 and 0.24: Debian 13 ships 0.23.2). A 0 written first makes the key either way: the sum then
# finds it and adds in place. Seen: one I/O's entry lost per vdev in CI's 2.4.4 guest (2026-11-27).
_SUM_LOST_FROM, _SUM_LOST_TO = (0, 20, 0), (0, 23, 3)
# the keys of a probe's maps without a Map keys line: room for 64k in-flight I/Os (vdev_queue's)
# instead of bpftrace's default 4096, past which updates fail
MAP_KEYS = 65536


def available(platform: str = "linux") -> list[str]:
    suffix = ".bt" if platform == "linux" else ".d"
    return sorted(p.stem for p in (probes_dir() / platform).glob("*" + suffix))


def source(name: str, platform: str = "linux") -> str:
    suffix = ".bt" if platform == "linux" else ".d"
    path = probes_dir() / platform / (name + suffix)
    if not path.is_file():
        raise ZfsobsError(f"no probe script {name!r} (have: {', '.join(available(platform))})")
    return _INCLUDE_RE.sub(lambda m: (path.parent / m.group(1)).read_text(), path.read_text())


def required_functions(text: str) -> list[str]:
    return _header_list(text, "Requires")


def required_offsets(text: str) -> list[str]:
    return _header_list(text, "Requires offsets")


def header(text: str, name: str) -> str:
    """A probe script's header line `NAME: ...` (after its comment star), or ''."""
    match = re.search(rf"^\s*\*\s*{name}:\s*(.+)$", text, re.M)
    return match.group(1).strip() if match else ""


def _header_list(text: str, name: str) -> list[str]:
    return header(text, name).replace(",", " ").split()


def map_keys(text: str) -> int:
    """The keys each map of a probe holds (its Map keys line, else MAP_KEYS)."""
    match = re.search(r"^\s*\*\s*Map keys:\s*(\d+)", text, re.M)
    return int(match.group(1)) if match else MAP_KEYS


def _expand_macros(text: str) -> str:
    macros = {m.group(1): m.group(2) for m in _MACRO_RE.finditer(text)}
    text = _MACRO_RE.sub("", text)
    for _ in range(len(macros) + 1):      # a macro may use macros: expand until none is left
        before = text
        for name, body in macros.items():
            def expand(m, body=body):
                return "".join(m.group(1) + line + "\n" for line in body.splitlines())
            text = re.sub(rf"^(\s*){name};\n", expand, text, flags=re.M)
        if text == before:
            break
    return text


@dataclass
class Rendered:
    name: str
    target: Target
    text: str
    sha256: str                                     # of the source script, for capture headers
    functions: list[str] = field(default_factory=list)   # attached
    dropped: list[str] = field(default_factory=list)     # what this target cannot give
    map_keys: int = MAP_KEYS                        # each map's size (the Map keys header)


def version_tuple(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a bpftrace version string ("v0.23.2", "0.17.0-..."); (0, 0, 0) if
    unreadable."""
    found = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    return tuple(int(n or 0) for n in found.groups()) if found else (0, 0, 0)


def sums_need_create(bpftrace: str) -> bool:
    """Does this bpftrace version lose a sum() that races another CPU making its key?"""
    return _SUM_LOST_FROM <= version_tuple(bpftrace) < _SUM_LOST_TO


def create_sums(text: str, bpftrace: str) -> str:
    """Each CREATE_SUM(@map[key]); line of `text` as that bpftrace version needs it: a 0 summed into
    the key first, or nothing."""
    need = sums_need_create(bpftrace)
    return _CREATE_SUM_RE.sub(lambda m: f"{m.group(1)}{m.group(2)} = sum((int64)0);\n" if need else "", text)


def render(name: str, target: Target, bpftrace: str = "") -> Rendered:
    """The script `name` for `target`, written for the bpftrace of version `bpftrace` ("": unknown, taken
    as one that needs no workaround)."""
    text = source(name)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    have = target.functions
    missing_required = [fn for fn in required_functions(text) if fn not in have]
    if missing_required:
        message = f"probe {name}: function {', '.join(missing_required)} not in this ZFS build ({target.name}); "
        absent = re.search(r"^\s*\*\s*Absent:\s*(.+)$", text, re.M)
        if absent:
            raise FeatureAbsent(message + absent.group(1))
        raise ZfsobsError(message + "the metric cannot be traced here")
    offsets = offsets_for(target)
    missing_offsets = [f for f in required_offsets(text) if f not in offsets]
    if missing_offsets:
        raise ZfsobsError(f"probe {name}: struct layout of {target.name} unknown "
                          f"({', '.join(missing_offsets)}); the metric cannot be traced here")
    out, dropped, attached = [], [], []
    for block in _blocks(create_sums(expand_sets(_expand_macros(text), kind_of(name)), bpftrace)):
        probe = _PROBE_RE.search(block[0]) if block else None
        if probe and probe.group(2) not in have:
            dropped.append(f"function {probe.group(2)} absent")
            continue
        if probe:
            attached.append(probe.group(2))
        entry_fn = probe.group(2) if probe and probe.group(1) == "ENTRY" else ""
        for line in block:
            if line.lstrip().startswith(("/*", "*", "//")):
                out.append(line)      # comments keep their placeholder names
                continue
            fields = _OFF_RE.findall(line)
            unknown = [f for f in fields if f not in offsets]
            addresses = {g: target.global_address(g, entry_fn) if entry_fn else None
                         for g in _GLOBAL_RE.findall(line)}
            unknown += [g for g, a in addresses.items() if a is None]
            if unknown:
                dropped.append(f"offset {', '.join(unknown)} unknown for {target.name}")
                code, sep, fallback = line.partition(_FALLBACK)
                if not sep:
                    continue
                line = code[:len(code) - len(code.lstrip())] + fallback.strip()
            line = _OFF_RE.sub(lambda m: script_int(offsets[m.group(1)], m.group(1)), line)
            line = _GLOBAL_RE.sub(lambda m: addresses[m.group(1)], line)
            line = _PROBE_RE.sub(lambda m: (target.entry if m.group(1) == "ENTRY" else target.ret)(m.group(2)), line)
            line = re.sub(r"\bPROC\b", target.proc, line)
            line = re.sub(r"\bTARGET\b", target.kind, line)
            out.append(line)
    return Rendered(name, target, "\n".join(out) + "\n", digest, sorted(set(attached)), dropped, map_keys(text))


def _blocks(text: str) -> list[list[str]]:
    """Split a script into top-level pieces: a probe is its header lines through its closing '}'."""
    blocks, current, depth = [], [], 0
    for line in text.splitlines():
        current.append(line)
        depth += line.count("{") - line.count("}")
        if depth == 0 and (line.strip() == "}" or not line.strip() or line.lstrip().startswith(("/*", "*", "//"))):
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks
