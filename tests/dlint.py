"""A static reader of the D scripts (probes/illumos/*.d) for tests: no D compiler runs on these
machines, so this checks what can be checked from the text (docs/illumos.md says what that is).
It splits a script into clauses (probe descriptions, predicate, body), and checks printf/printa
argument counts against their formats, aggregation key arities, variables read but never set,
probe description form, comments and pragmas. It also derives the event lines a script prints."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

CONV_RE = re.compile(r"%(@?)[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|L)?([a-zA-Z%])")
PROBE_RE = re.compile(r"^(fbt|sdt|profile|dtrace)(?::[\w$-]*){3}$|^(profile:::tick-\d+(?:s|ms|hz))$")
PROVIDER_NAMES = {"dtrace": {"BEGIN", "END", "ERROR"}}
OPTIONS = {"quiet", "defaultargs", "argref", "dynvarsize", "aggrate", "switchrate", "bufsize", "strsize"}
BUILTINS = {"timestamp", "arg0", "arg1", "arg2", "arg3", "args", "probename", "cpu", "NULL"}


@dataclass
class Clause:
    probes: list[str]
    predicate: str
    body: str
    line: int


@dataclass
class Script:
    text: str
    clauses: list[Clause] = field(default_factory=list)
    pragmas: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    declared: set[str] = field(default_factory=set)


def strip_comments(text: str) -> str:
    """Comments out, newlines kept (line numbers stay right); strings are left alone."""
    return re.sub(r'"(?:[^"\\\n]|\\.)*"|/\*.*?\*/', lambda m: m.group(0) if m.group(0)[0] == '"'
                  else "\n" * m.group(0).count("\n"), text, flags=re.S)


def split_top(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside strings, parentheses and brackets."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i = text.index('"', i + 1) if '"' in text[i + 1:] else len(text)
            while text[i - 1] == "\\":
                i = text.index('"', i + 1)
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def parse(text: str) -> Script:
    script = Script(text)
    code = strip_comments(text)
    if "//" in re.sub(r'"(?:[^"\\]|\\.)*"', '""', code):
        script.problems.append("a // comment: D has only /* */ comments")
    for line in code.splitlines():
        if line.startswith("#"):
            found = re.match(r"#pragma D option (\w+)(=\w+)?$", line.strip())
            if not found or found.group(1) not in OPTIONS:
                script.problems.append(f"unknown pragma: {line.strip()}")
            script.pragmas.append(line.strip())
    code = re.sub(r"^#.*$", "", code, flags=re.M)
    # top-level declarations (`uint64_t name[uint64_t];`): no clause; kept as blank lines
    decl = re.compile(r"^[A-Za-z_][\w ]*?\s(\w+)\s*(?:\[[\w ,*]*\])?\s*;[ \t]*$", re.M)
    script.declared = set(decl.findall(code))
    code = decl.sub("", code)
    i, depth, head_start = 0, 0, 0
    while i < len(code):
        c = code[i]
        if c == '"':
            i = code.index('"', i + 1)
        elif c == "{":
            if depth == 0:
                body_start, head = i + 1, code[head_start:i]
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                script.problems.append(f"unbalanced }} at line {code.count(chr(10), 0, i) + 1}")
                depth = 0
            elif depth == 0:
                script.clauses.append(_clause(head, code[body_start:i], code.count("\n", 0, head_start) + 1, script))
                head_start = i + 1
        i += 1
    if depth or code[head_start:].strip():
        script.problems.append("text after the last clause, or an unclosed {")
    _check(script)
    return script


def _clause(head: str, body: str, line: int, script: Script) -> Clause:
    head = head.strip()
    probes_text, _, rest = head.partition("/")
    predicate = ""
    if rest:
        if not rest.rstrip().endswith("/"):
            script.problems.append(f"line {line}: predicate not closed with /")
        predicate = rest.rstrip()[:-1]
    probes = [p.strip() for p in probes_text.replace("\n", " ").split(",")]
    for probe in probes:
        if not PROBE_RE.match(probe):
            script.problems.append(f"line {line}: bad probe description {probe!r}")
        provider = probe.split(":")[0]
        if provider in PROVIDER_NAMES and probe.split(":")[3] not in PROVIDER_NAMES[provider]:
            script.problems.append(f"line {line}: {probe} is not a dtrace provider probe")
    return Clause(probes, predicate, body, line)


def calls(body: str, name: str) -> list[list[str]]:
    """The argument lists of each call of `name` in a clause body."""
    out = []
    for m in re.finditer(rf"\b{name}\(", body):
        depth, i = 1, m.end()
        while depth:
            if body[i] == '"':
                i = body.index('"', i + 1)
            depth += {"(": 1, ")": -1}.get(body[i], 0)
            i += 1
        out.append([a.strip() for a in split_top(body[m.end():i - 1], ",")])
    return out


def conversions(fmt: str) -> list[str]:
    """'@' for an aggregation value, else the conversion letter, for each % in a format."""
    return ["@" if m.group(1) else m.group(2) for m in CONV_RE.finditer(fmt) if m.group(2) != "%"]


def agg_arity(text: str) -> dict[str, set[int]]:
    arity: dict[str, set[int]] = {}
    for m in re.finditer(r"@(\w+)\[([^\]]*(?:\[[^\]]*\][^\]]*)*)\]\s*=", strip_comments(text)):
        arity.setdefault(m.group(1), set()).add(len(split_top(m.group(2), ",")))
    return arity


def _check(script: Script) -> None:
    # zfsobs passes every script two macro arguments (zfsobs/sources/dtrace.py command_line: the pool
    # and the interval); dtrace refuses a script whose last one is never referenced ("extraneous
    # argument '1' ($2 is not referenced)", D_MACRO_UNUSED: illumos, FreeBSD and Linux alike) unless
    # argref is set; defaultargs covers only the opposite case (seen on DTrace 2.0.7, issue 27)
    code = strip_comments(script.text)
    if not re.search(r"\$\$?2\b", code) and "#pragma D option argref" not in script.pragmas:
        script.problems.append("$2 (the interval zfsobs passes) is never referenced: needs #pragma D option argref")
    _check_order(script)
    _check_keys(script)
    arity = agg_arity(script.text)
    for name, sizes in arity.items():
        if len(sizes) > 1:
            script.problems.append(f"@{name} used with {sorted(sizes)} keys")
    assigned = set(re.findall(r"((?:self|this)->\w+)\s*(?:[-+*/|&]?=|\+\+|--)", script.text))
    for clause in script.clauses:
        for stmt in split_top(clause.body, ";")[:-1] if clause.body.strip() else []:
            if stmt.count("(") != stmt.count(")") or stmt.count("[") != stmt.count("]"):
                script.problems.append(f"line {clause.line}: unbalanced statement {stmt.strip()[:60]!r}")
        if clause.body.strip() and not clause.body.strip().endswith(";"):
            script.problems.append(f"line {clause.line}: the last statement has no ;")
        used = set(re.findall(r"(?:self|this)->\w+", clause.predicate + clause.body))
        for var in sorted(used - assigned):
            script.problems.append(f"line {clause.line}: {var} is read but never set")
        for args in calls(clause.body, "printf"):
            if len(conversions(_string(args[0]))) != len(args) - 1:
                script.problems.append(f"line {clause.line}: printf has {len(args) - 1} arguments for "
                                       f"{len(conversions(_string(args[0])))} conversions")
        for args in calls(clause.body, "printa"):
            conv, aggs = conversions(_string(args[0])), args[1:]
            if any(not a.startswith("@") for a in aggs) or conv.count("@") != len(aggs):
                script.problems.append(f"line {clause.line}: printa has {len(aggs)} aggregations for "
                                       f"{conv.count('@')} %@ conversions")
            keys = {n for a in aggs for n in arity.get(a[1:], {-1})}
            if len(keys) != 1 or len(conv) - conv.count("@") != keys.pop():
                script.problems.append(f"line {clause.line}: printa key conversions do not match the keys")


ASSIGN_RE = r"\s*(?:[-+*/|&]?=(?!=)|\+\+|--)"


def _check_order(script: Script) -> None:
    """What D refuses or gets wrong by textual order. A global array read before it is declared or
    assigned does not compile ('has not yet been declared or assigned', D types a variable where it
    first appears). And this-> variables are not zeroed between firings: one tested in a predicate
    must be set by an earlier clause of each of its probes that always runs (no predicate), or whose
    predicate begins this one's, else it can hold a value from an earlier firing (issue 27)."""
    known = set(script.declared)
    for clause in script.clauses:
        for stmt in split_top(clause.predicate, ";") + split_top(clause.body, ";"):
            target = re.match(r"\s*(?<![@>.])\b([a-z_]\w*)\[[^;]*?\]" + ASSIGN_RE, stmt)
            head = target.end(1) if target else 0
            for m in re.finditer(r"(?<![@>.\w])([a-z_]\w*)\[", stmt[head:]):
                if m.group(1) not in known and m.group(1) != "args":
                    script.problems.append(f"line {clause.line}: {m.group(1)}[] is read before it is "
                                           "declared or assigned (declare it at the top)")
                    known.add(m.group(1))
            if target:
                known.add(target.group(1))
    for i, clause in enumerate(script.clauses):
        for var in sorted(set(re.findall(r"this->\w+", clause.predicate))):
            for probe in clause.probes:
                if not any(probe in e.probes and re.search(re.escape(var) + ASSIGN_RE, e.body)
                           and (not e.predicate or clause.predicate.startswith(e.predicate + " &&"))
                           for e in script.clauses[:i]):
                    script.problems.append(f"line {clause.line}: {var} in the predicate may be stale for "
                                           f"{probe}: no earlier clause of it that always runs sets it")


def _check_keys(script: Script) -> None:
    """A this-> variable that keys an aggregation is set once a clause: a second meaning given to the
    same name files every count after it under the wrong key (zil.d's itx type in its txg slot,
    2026-11-28: D's itxs landed in the txgs of slot 9)."""
    code = strip_comments(script.text)
    keys = {v for m in re.finditer(r"@\w+\[([^\]]*)\]\s*=", code) for v in re.findall(r"this->\w+", m.group(1))}
    for clause in script.clauses:
        stmts = split_top(clause.body, ";")
        for var in sorted(keys):
            # a refinement reads the variable it sets (this->p = ... this->p): the same meaning
            fresh = [s for s in stmts if re.match(r"\s*" + re.escape(var) + r"\s*=(?!=)", s)
                     and var not in s.split("=", 1)[1]]
            if len(fresh) > 1:
                script.problems.append(f"line {clause.line}: {var} keys aggregations and is given a second meaning here")


def _string(arg: str) -> str:
    if not (arg.startswith('"') and arg.endswith('"')):
        raise ValueError(f"format is not a string literal: {arg[:40]}")
    return arg[1:-1]


def events(text: str) -> dict[str, set[frozenset]]:
    """kind -> the field sets of every `zfsobs 1 <kind>` line the script's printf/printa formats print
    (works for bpftrace's .bt as well)."""
    out: dict[str, set[frozenset]] = {}
    for fmt in re.findall(r"\bprint[fa]\(\s*\"((?:[^\"\\]|\\.)*)\"", strip_comments(text)):
        for line in fmt.split("\\n"):
            parts = line.split()
            if len(parts) >= 4 and parts[:2] == ["zfsobs", "1"]:
                out.setdefault(parts[2], set()).add(frozenset(p.split("=")[0] for p in parts[4:]))
    return out


def formats(text: str) -> dict[str, list[str]]:
    """kind -> the format strings (one line each) that print it."""
    out: dict[str, list[str]] = {}
    for fmt in re.findall(r"\bprint[fa]\(\s*\"((?:[^\"\\]|\\.)*)\"", strip_comments(text)):
        for line in fmt.split("\\n"):
            parts = line.split()
            if len(parts) >= 4 and parts[:2] == ["zfsobs", "1"]:
                out.setdefault(parts[2], []).append(line)
    return out
