"""Struct offsets and flag values of a target, which probe scripts read through OFF() and CONST():
from probes/offsets.json for a library's release, else for the zfs module from its own BTF or
compiled from its installed source (zfsobs/targets/layouts.py)."""
from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

from zfsobs.targets import layouts
from zfsobs.targets.btf import Btf, resolve_table
from zfsobs.targets.platforms import uses_dtrace
from zfsobs.targets.probe_files import offsets_table
from zfsobs.targets.target import Target

MODULE_BTF, VMLINUX_BTF = "/sys/kernel/btf/zfs", "/sys/kernel/btf/vmlinux"


def _build_entry(target: Target) -> dict:
    return offsets_table().get(target.kind, {}).get(target.version, {})


@functools.lru_cache(maxsize=None)
def _module_btf(path: str = MODULE_BTF, base: str = VMLINUX_BTF) -> dict[str, int]:
    """Every OFF()/CONST() name the tables know, looked up in the running module's own BTF. Kept in
    the layouts cache under a digest of both BTFs and the table: parsing them takes each process
    2.3 s here (63 s under emulation before Btf._str stopped copying the string table per name),
    and reading that file takes none."""
    table = layouts.specs(offsets_table())
    key = hashlib.sha256(json.dumps(table, sort_keys=True).encode())
    for p in (path, base):
        with open(p, "rb") as f:
            key.update(f.read())
    cache = Path(os.environ.get("ZFSOBS_LAYOUTS_CACHE") or layouts.CACHE) / f"btf-{key.hexdigest()[:32]}.json"
    try:
        return {k: int(v) for k, v in json.loads(cache.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        pass
    values = resolve_table(Btf(path, base=Btf(base)), table)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(values, indent=1, sort_keys=True) + "\n")
        tmp.replace(cache)
    except OSError:
        pass        # not root (doctor): parsed again next time
    return values


def offsets_for(target: Target) -> dict[str, int]:
    """Struct offsets and flag values of the target: for the zfs module from its BTF when it has
    one, else compiled from its installed source (zfsobs/targets/layouts.py; none when that cannot be done:
    target.layouts says why); for a library, of its release (offsets.json says where they come from)."""
    build = _build_entry(target)
    if target.kind == "kernel" and not uses_dtrace():
        same_release = offsets_table()["libzpool"].get(target.version, {}).get("constants", {})
        if target.btf:
            found, target.layouts = dict(_module_btf()), f"module BTF ({MODULE_BTF})"
            # a flag that is a macro, not an enumerator (ZIO_FLAG_* from 2.2 on), is not in BTF:
            # compiled from the module's installed source, as without BTF
            consts = offsets_table()["btf"]["constants"]
            lacking = {n: consts[n] for n in consts if n not in found and n not in same_release}
            extra, how = layouts.module_layouts(target.version, lacking) if lacking else ({}, "")
            extra = {n: v for n, v in extra.items() if n in lacking}
            if extra:
                found.update(extra)
                target.layouts += f"; {', '.join(sorted(extra))} {how}"
        else:
            found, target.layouts = layouts.module_layouts(target.version, layouts.specs(offsets_table()))
        if found:
            return {**same_release, **build.get("constants", {}), **found}
    return {**build.get("fields", {}), **build.get("constants", {})}


def offsets_origin(target: Target) -> str:
    """How the target's struct layout is known, for doctor."""
    build = _build_entry(target)
    if target.kind == "kernel" and not uses_dtrace():
        found = offsets_for(target)
        if target.btf:
            extra = target.layouts.partition("; ")[2]
            return (f"from the module's own BTF ({MODULE_BTF}): {len(_module_btf())} fields and flags found"
                    + (f"; {extra}" if extra else ""))
        if target.layouts.startswith("compiled"):
            return f"{target.layouts}: {len(found)} fields and flags"
        return f"unknown for {target.name}: {target.layouts}; probes that read struct fields are off"
    if not build.get("fields"):
        return f"unknown for {target.name}: probes that read struct fields are off"
    if target.build_id and target.build_id in build.get("build_ids", []):
        return f"{target.version}, checked on this build ({target.build_id[:12]})"
    return f"{target.version}, derived from the release's headers (this build {target.build_id[:12] or 'has no build-id'} not checked)"
