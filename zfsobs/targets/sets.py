"""The map sets' code in a probe script (probes/linux/sets.btm), written from its field table
(zfsobs/fields.py):
  // each SET in sets ... // end each   the lines once per set, SET its number (0 .. SETS - 1)
  SETS                                  the number of sets
  ADD(k1, k2, field, value);            field of (k1, k2) grows by value, in the set $ep
  TOP(k1, k2, field, value);            field of (k1, k2) is at least value, in the set $ep
  SLOT(f)                               field f's slot number (vdev_queue's own sets, the D twins)
A field is a name of the probe's table, or `name + expression` (the slot that many after it); its
slot number comes from the table and nowhere else. A probe without maxima has no @x lines.
"""
from __future__ import annotations

import re

from zfsobs.errors import ZfsobsError
from zfsobs.fields import KINDS, Kind

SETS = 3
_EACH_RE = re.compile(r"^[ \t]*// each SET in sets\n(.*?)^[ \t]*// end each\n", re.M | re.S)
_SET_RE = re.compile(r"SET(?![A-Za-z_])")
_CALL_RE = re.compile(r"^([ \t]*)(ADD|TOP)\((.*)\);[ \t]*$", re.M)
_FIELD_RE = re.compile(r"^\s*(\w+)\s*(?:\+\s*(.+?))?\s*$")
_SLOT_RE = re.compile(r"\bSLOT\((\w+)\)")


def kind_of(name: str) -> Kind | None:
    return KINDS.get(name)


def expand(text: str, kind: Kind | None) -> str:
    """`text` with its sets written out (unchanged if it uses none)."""
    if kind is None:
        if _CALL_RE.search(text) or _EACH_RE.search(text) or _SLOT_RE.search(text):
            raise ZfsobsError("a probe that counts in map sets needs a field table (zfsobs/fields.py)")
        return text
    text = slots(text, kind)
    text = _EACH_RE.sub(lambda m: _each(m.group(1), kind), text)
    text = re.sub(r"\bSETS\b", str(SETS), text)
    return _CALL_RE.sub(lambda m: _call(m.group(1), m.group(2), m.group(3), kind), text)


def slots(text: str, kind: Kind | None) -> str:
    """`text` with each SLOT(f) the number of f's slot in `kind`'s table."""
    if kind is None:
        if _SLOT_RE.search(text):
            raise ZfsobsError("a probe that names its slots needs a field table (zfsobs/fields.py)")
        return text
    return _SLOT_RE.sub(lambda m: str(_slot(kind, m.group(1))[1]), text)


def _slot(kind: Kind, name: str) -> tuple[str, int]:
    try:
        return kind.slot(name)
    except KeyError as exc:
        raise ZfsobsError(str(exc.args[0])) from None


def _each(body: str, kind: Kind) -> str:
    if not kind.tops:
        body = "".join(line for line in body.splitlines(True) if "@xSET" not in line)
    return "".join(_SET_RE.sub(str(s), body) for s in range(SETS))


def _args(text: str) -> list[str]:
    """Top-level comma-separated arguments."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += (ch in "([") - (ch in ")]")
        cur += ch
    return out + [cur.strip()]


def slot_expr(kind: Kind, field: str, want: str) -> str:
    """The slot of `field` (`name` or `name + expr`) as a bpftrace expression; `want` 'n' or 'x'."""
    m = _FIELD_RE.match(field)
    if not m:
        raise ZfsobsError(f"{kind.probe}: no field in {field!r}")
    which, index = _slot(kind, m.group(1))
    if which != want:
        raise ZfsobsError(f"{kind.probe}: {m.group(1)} is a {'sum' if which == 'n' else 'maximum'}")
    return f"(uint64)({index} + {m.group(2)})" if m.group(2) else f"(uint64){index}"


def _call(indent: str, op: str, args: str, kind: Kind) -> str:
    parts = _args(args)
    if len(parts) != 4:
        raise ZfsobsError(f"{kind.probe}: {op}({args}) takes k1, k2, field, value")
    k1, k2, field, value = parts
    which = "n" if op == "ADD" else "x"
    key = f"[PROC, {k1}, {k2}, {slot_expr(kind, field, which)}]"

    def one(s: int, pad: str) -> list[str]:
        if op == "TOP":
            return [f"{pad}@x{s}{key} = max((int64)({value}));"]
        return [f"{pad}CREATE_SUM(@n{s}{key});", f"{pad}@n{s}{key} = sum((int64)({value}));"]

    lines, pad = [], indent
    for s in range(SETS - 1):
        lines.append(f"{pad}if ($ep == {s}) {{")
        lines += one(s, pad + "\t")
        lines.append(f"{pad}}} else {{")
        pad += "\t"
    lines += one(SETS - 1, pad)
    for _ in range(SETS - 1):
        pad = pad[:-1]
        lines.append(f"{pad}}}")
    return "\n".join(lines)
