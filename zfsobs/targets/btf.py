"""Struct layouts from BTF, the kernel's own type information (/sys/kernel/btf/vmlinux, and a
module's split BTF such as /sys/kernel/btf/zfs, whose type ids and strings continue the base's).
With module BTF the kernel target needs no offsets table: every OFF()/CONST() of a probe script is
looked up in the running module itself. Format: Documentation/bpf/btf.rst."""
from __future__ import annotations

import re
import struct

from zfsobs.errors import ZfsobsError

MAGIC = 0xEB9F
INT, PTR, ARRAY, STRUCT, UNION, ENUM, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT = range(1, 12)
FUNC, FUNC_PROTO, VAR, DATASEC, FLOAT, DECL_TAG, TYPE_TAG, ENUM64 = range(12, 20)
# bytes after the 12-byte common header: fixed, or per vlen item
_FIXED = {INT: 4, ARRAY: 12, VAR: 4, DECL_TAG: 4}
_PER_ITEM = {STRUCT: 12, UNION: 12, ENUM: 8, FUNC_PROTO: 8, DATASEC: 12, ENUM64: 12}
_MODIFIERS = (TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG)
_STEP_RE = re.compile(r"^(\w+)(?:\[(\d+)\])?$")


class Btf:
    def __init__(self, path: str, base: "Btf | None" = None):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise ZfsobsError(f"cannot read BTF {path}: {exc.strerror}") from None
        if len(data) < 24:
            raise ZfsobsError(f"{path}: not BTF (too short)")
        magic, _version, _flags, hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from("<HBBIIIII", data)
        if magic != MAGIC:
            raise ZfsobsError(f"{path}: not BTF (magic {magic:#x})")
        self.base = base
        self.strings = data[hdr_len + str_off: hdr_len + str_off + str_len]
        self._str_base = len(base.all_strings()) if base else 0
        self._first_id = base.next_id if base else 1       # id 0 is void
        # Types are only located here and decoded when asked for: a module's layout needs a handful of
        # vmlinux's ~100k types, and decoding them all cost seconds (minutes under the kernel lab's TCG).
        self._buf = data[hdr_len + type_off: hdr_len + type_off + type_len]
        self._pos = self._locate(self._buf)
        self._decoded: dict[int, tuple] = {}
        self.next_id = self._first_id + len(self._pos)
        self._names: dict[tuple[int, str], list[int]] | None = None
        self._enums: dict[str, int] | None = None

    def all_strings(self) -> bytes:
        return (self.base.all_strings() if self.base else b"") + self.strings

    def _str(self, off: int) -> str:
        if off < self._str_base:
            return self.base._str(off)
        start = off - self._str_base      # not a slice to the end: that copied megabytes per name
        return self.strings[start:self.strings.index(b"\0", start)].decode()

    @staticmethod
    def _locate(buf: bytes) -> list[int]:
        """Where each type record starts (records vary in length with their kind and vlen)."""
        pos, starts, unpack = 0, [], struct.unpack_from
        while pos < len(buf):
            starts.append(pos)
            info = unpack("<I", buf, pos + 4)[0]
            kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
            pos += 12
            if kind in _PER_ITEM:
                pos += _PER_ITEM[kind] * vlen
            elif kind in _FIXED:
                pos += _FIXED[kind]
            elif kind not in (PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG):
                raise ZfsobsError(f"BTF: unknown type kind {kind}")
        return starts

    def _decode(self, i: int) -> tuple:
        """Type record i as (kind, name, size_or_type, kind_flag, items)."""
        buf, pos = self._buf, self._pos[i]
        name_off, info, size_or_type = struct.unpack_from("<III", buf, pos)
        pos += 12
        kind, vlen, kflag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
        items = []
        if kind in (STRUCT, UNION):
            for _ in range(vlen):
                m_name, m_type, m_off = struct.unpack_from("<III", buf, pos)
                pos += 12
                # with kind_flag the offset word also holds a bitfield size in its top byte
                items.append((self._str(m_name) if m_name else "", m_type, m_off & 0xFFFFFF if kflag else m_off))
        elif kind == ENUM:
            for _ in range(vlen):
                e_name, e_val = struct.unpack_from("<Ii", buf, pos)
                pos += 8
                items.append((self._str(e_name), e_val))
        elif kind == ENUM64:
            for _ in range(vlen):
                e_name, lo, hi = struct.unpack_from("<III", buf, pos)
                pos += 12
                items.append((self._str(e_name), lo | hi << 32))
        elif kind == ARRAY:
            items = list(struct.unpack_from("<III", buf, pos))      # elem type, index type, nelems
        return kind, self._str(name_off) if name_off else "", size_or_type, kflag, items

    @property
    def types(self) -> list[tuple]:
        return [self.type(self._first_id + i) for i in range(len(self._pos))]

    def type(self, tid: int) -> tuple:
        if tid < self._first_id:
            if self.base is None:
                raise ZfsobsError(f"BTF: no type {tid}")
            return self.base.type(tid)
        i = tid - self._first_id
        if i not in self._decoded:
            if i >= len(self._pos):
                raise ZfsobsError(f"BTF: no type {tid}")
            self._decoded[i] = self._decode(i)
        return self._decoded[i]

    def _named(self, kind: int, name: str) -> list[int]:
        if self._names is None:       # names only: no member lists decoded
            self._names = {}
            for i, pos in enumerate(self._pos):
                name_off, info = struct.unpack_from("<II", self._buf, pos)
                if name_off:
                    key = ((info >> 24) & 0x1F, self._str(name_off))
                    self._names.setdefault(key, []).append(self._first_id + i)
        found = self._names.get((kind, name), [])
        # a module's own types shadow the base's (and spare indexing all of vmlinux's names)
        return found + (self.base._named(kind, name) if self.base and not found else [])

    def _resolve(self, tid: int) -> tuple:
        """The type behind typedefs and qualifiers."""
        t = self.type(tid)
        while t[0] in _MODIFIERS:
            t = self.type(t[2])
        return t

    def sizeof(self, tid: int) -> int:
        t = self._resolve(tid)
        if t[0] == ARRAY:
            return self.sizeof(t[4][0]) * t[4][2]
        if t[0] == PTR:
            return 8
        return t[2]

    def struct(self, name: str) -> int:
        """The id of the complete struct (or union) `name`, or of a typedef to one (`zio_t`)."""
        for kind in (STRUCT, UNION):
            for tid in self._named(kind, name):
                if self.type(tid)[4]:
                    return tid
        for tid in self._named(TYPEDEF, name):
            t = self._resolve(tid)
            if t[0] in (STRUCT, UNION):
                return tid
        raise ZfsobsError(f"BTF: no struct {name}")

    def _member(self, tid: int, name: str) -> tuple[int, int] | None:
        """(bit offset, type id) of member `name`, looking into anonymous structs and unions."""
        for m_name, m_type, m_off in self._resolve(tid)[4]:
            if m_name == name:
                return m_off, m_type
            if not m_name and self._resolve(m_type)[0] in (STRUCT, UNION):
                inner = self._member(m_type, name)
                if inner:
                    return m_off + inner[0], inner[1]
        return None

    def offset(self, path: str) -> tuple[int, int]:
        """("struct.member[.member|[i]]...") -> (byte offset, type id of the last member)."""
        name, *steps = path.split(".")
        tid, bits = self.struct(name), 0
        for step in steps:
            m = _STEP_RE.match(step)
            if not m:
                raise ZfsobsError(f"BTF: bad path {path!r}")
            found = self._member(tid, m[1])
            if found is None:
                raise ZfsobsError(f"BTF: {path}: no member {m[1]}")
            bits, tid = bits + found[0], found[1]
            if m[2] is not None:
                arr = self._resolve(tid)
                if arr[0] != ARRAY:
                    raise ZfsobsError(f"BTF: {path}: {m[1]} is not an array")
                tid = arr[4][0]
                bits += self.sizeof(tid) * 8 * int(m[2])
        if bits % 8:
            raise ZfsobsError(f"BTF: {path} is a bitfield")
        return bits // 8, tid

    def stride(self, path: str) -> int:
        """Element size of the array member at `path`."""
        _, tid = self.offset(path)
        arr = self._resolve(tid)
        if arr[0] != ARRAY:
            raise ZfsobsError(f"BTF: {path} is not an array")
        return self.sizeof(arr[4][0])

    def enum_value(self, name: str) -> int:
        """The value of enumerator `name` (e.g. ZIO_FLAG_DONT_QUEUE) in any enum."""
        for btf in self._chain():
            if btf._enums is None:      # one pass over the enums, not one per lookup (~100k types)
                btf._enums = {}
                for kind, _, _, _, items in btf.types:
                    if kind in (ENUM, ENUM64):
                        for e_name, value in items:
                            btf._enums.setdefault(e_name, value)
            if name in btf._enums:
                return btf._enums[name]
        raise ZfsobsError(f"BTF: no enumerator {name}")

    def _chain(self) -> list["Btf"]:
        return [self] + (self.base._chain() if self.base else [])

    def lookup(self, spec: str) -> int:
        """One spec of offsets.json's "btf" table: a member path (its offset), "stride:PATH",
        "sizeof:NAME", "enum:NAME", "gap:STRUCT.PATH-PATH" (how far the first member lies past
        the second), "if:PATH=N" (N where the module has that member) or "value:N"."""
        kind, sep, arg = spec.partition(":")
        if not sep:
            return self.offset(spec)[0]
        if kind == "value":
            return int(arg)
        if kind == "if":
            path, _, value = arg.partition("=")
            self.offset(path)
            return int(value)
        if kind == "gap":
            first, _, second = arg.partition("-")
            return self.offset(first)[0] - self.offset(first.split(".")[0] + "." + second)[0]
        if kind == "stride":
            return self.stride(arg)
        if kind == "sizeof":
            return self.sizeof(self.struct(arg))
        if kind == "enum":
            return self.enum_value(arg)
        raise ZfsobsError(f"BTF: bad spec {spec!r}")


def resolve_table(btf: Btf, table: dict[str, list[str]]) -> dict[str, int]:
    """{name: first spec of its alternatives that this BTF has}; names none of whose specs fit
    are left out (the renderer then drops or degrades what needs them, as for any unknown build)."""
    out = {}
    for name, specs in table.items():
        for spec in specs:
            try:
                out[name] = btf.lookup(spec)
                break
            except ZfsobsError:
                continue
    return out
