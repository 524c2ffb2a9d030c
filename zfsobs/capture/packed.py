"""Format 3's V payload: a record's counter lines as columns of changes, the same text back.

A line is a template (its words, with each number that does not name its series cut out) and
those numbers. A record holds each template once, each line's template in order, and per template
its numbers column by column, each as its change from the line before of the same template in this
record: counters change little in a second, so the changes are small and mostly zero, and zlib packs
them to about half of the lines' own text (docs/performance.md). A template's first ts is its change
from the record's first; its other first numbers are whole. Only this record is needed to read it
back (the crash rule: every record stands alone).

    payload = "T N BASE M\\n", T templates each ending "\\n", then N + M bytes: the N lines' template
              indices and the M zigzag-coded numbers, each a byte below 255, or 255 for one that is
              not: those follow, in order, as unsigned LEB128 varints

A record of a few lines (a quiet pool's second) packs no smaller than its text, whose repeats zlib
finds across its lines: such a record keeps whichever is smaller (zfsobs/capture/format.py).

Every number comes back as the text it was: only plain decimal integers (no sign on 0, no leading
zeros) below 10^18 are cut out, so a change always fits in 64 bits; anything else stays in the template.
"""
from __future__ import annotations

import re
from operator import add

CUT = "\x00"      # where a number was cut out of a template
ESC = 255
# a word `name=number` whose name does not name a series (those stay in the template)
_WORD = re.compile(r"( (?!(?:pool|pid|vd|class|kind|guid|path)=)[^ =]*=)(-?[1-9][0-9]{0,17}|0)(?= |$)")
_NUMBER = re.compile(r"-?[1-9][0-9]{0,17}|0")
_BIG = 1 << 63


def packable(line: str) -> bool:
    """Printable lines only (no CUT, nothing splitlines() would split): the writer puts any other
    counter line in an E record, so it reads back as text lines always did."""
    return line.isprintable()


def pack(lines: list[str]) -> bytes:
    """The lines as a payload; every line must be packable()."""
    index: dict[str, int] = {}
    tables: list[list[list[int]]] = []       # per template, its lines' changes
    last: list[list[int]] = []               # per template, its last line's numbers
    order: list[int] = []
    base = None
    for line in lines:
        w = line.split(" ", 4)
        if len(w) >= 4 and _NUMBER.fullmatch(w[3]):     # word 3, the ts: the first number
            numbers = [int(w[3])]
            head = f"{w[0]} {w[1]} {w[2]} {CUT}"
            base = numbers[0] if base is None else base
        else:
            numbers, head = [], " ".join(w[:4])
        parts = _WORD.split(" " + w[4]) if len(w) == 5 else [""]
        numbers += map(int, parts[2::3])
        parts[2::3] = [CUT] * (len(parts) // 3)
        template = head + "".join(parts)
        i = index.get(template)
        if i is None:
            i = index[template] = len(tables)
            tables.append([])
            last.append(numbers)
            first = list(numbers)
            if head.endswith(CUT):
                first[0] -= base
            tables[i].append(first)
        else:
            tables[i].append([b - a for a, b in zip(last[i], numbers)])
            last[i] = numbers
        order.append(i)
    changes = []
    for table in tables:
        for column in zip(*table):
            changes.extend(column)
    values = order + [(n << 1) ^ (n >> 63) for n in changes]
    out = f"{len(tables)} {len(order)} {base or 0} {len(changes)}\n" + "".join(t + "\n" for t in index)
    return (out.encode() + bytes([n if n < ESC else ESC for n in values])
            + _varints([n for n in values if n >= ESC]))


def unpack(payload: bytes, max_lines: int = 1 << 17, max_text: int = 16 << 20) -> list[str] | None:
    """The lines of a payload `pack` made, or None for one it did not make (damage) or one whose
    lines would be more than max_lines or max_text characters: checked before any line is made."""
    try:
        first, rest = payload.split(b"\n", 1)
        ntemplates, nlines, base, nchanges = (int(n) for n in first.split(b" "))
        if min(ntemplates, nlines, nchanges) < 0 or nlines > max_lines or not -_BIG < base < _BIG:
            return None
        parts = rest.split(b"\n", ntemplates)
        if len(parts) != ntemplates + 1:
            return None
        templates = [t.decode() for t in parts[:ntemplates]]
        data = parts[ntemplates]
        head = data[:nlines + nchanges]
        if len(head) != nlines + nchanges or nlines + nchanges > max_text:
            return None
        big = _unvarints(data[nlines + nchanges:], head.count(ESC))
        if big is None:
            return None
    except (ValueError, OverflowError, UnicodeDecodeError):
        return None
    big = iter(big)     # the escaped numbers, in their places
    order = list(head[:nlines])
    if ESC in order:
        order = [i if i < ESC else next(big) for i in order]
    counts = [0] * ntemplates
    try:
        for i in order:
            counts[i] += 1
    except IndexError:
        return None
    # the text it makes, each line its template and at most 20 characters a number: bounded
    # before a number is decoded or a line made
    widths = [t.count(CUT) for t in templates]
    if (sum(w * n for w, n in zip(widths, counts)) != nchanges
            or sum(n * (len(t) + 20 * w) for t, n, w in zip(templates, counts, widths)) > max_text):
        return None
    changes = [(n >> 1) ^ -(n & 1) if n < ESC else (m := next(big)) >> 1 ^ -(m & 1) for n in head[nlines:]]
    rows, at = [], 0           # per template, its lines' numbers in order
    for template, n in zip(templates, counts):
        width = template.count(CUT)
        end, mine = at + width * n, []
        if end > len(changes):
            return None
        if width and n:
            row = changes[at:end:n]         # its first line's: one change per column
            if template.split(" ", 4)[3:4] == [CUT]:
                row[0] += base              # its first number is the ts, word 3
            mine.append(tuple(row))
            for k in range(1, n):
                row = list(map(add, row, changes[at + k:end:n]))
                mine.append(tuple(row))
        else:
            mine = [()] * n
        rows.append(iter(mine))
        at = end
    if at != len(changes):
        return None
    # each template as a %-format: the numbers go back in by C code, not a join per number
    formats = [t.replace("%", "%%").replace(CUT, "%d") for t in templates]
    return [formats[i] % next(rows[i]) for i in order]


def _varints(values: list[int]) -> bytes:
    out = bytearray()
    for n in values:
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
    return bytes(out)


def _unvarints(data: bytes, count: int) -> list[int] | None:
    """The `count` varints that make up data, or None."""
    if len(data) > 10 * count:      # a varint of 64 bits is at most 10 bytes
        return None
    values, n, shift = [], 0, 0
    for b in data:
        n |= (b & 0x7F) << shift
        if b < 0x80:
            values.append(n)
            n = shift = 0
        else:
            shift += 7
            if shift > 63:
                return None
    return None if shift or len(values) != count else values
