"""Hostile values on their way into a probe script: every input the command line takes that reaches
a render (the --target library path, the bpftrace whose version the render asks, -p's pool name on
dtrace's command line) is either refused with one `zfsobs: ...` line or leaves the rendered program
as it is with a benign value: the same probe headers (attach points) and the same braces.
The attack itself (a symlink made by `nobody` to a libzpool copy whose path holds bpftrace code)
is made for real and run through `probes show` and `record`."""
from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from test_probes import kernel_target
from zfsobs.errors import ZfsobsError
from zfsobs.sources.dtrace import command_line
from zfsobs.targets import render as probes
from zfsobs.targets.d_render import D_DIRS, for_system, script_text
from zfsobs.targets.names import pool_name
from zfsobs.targets.probe_files import probes_dir
from zfsobs.targets.target import Target, find_libraries, libzpool

ZFSOBS = [sys.executable, "-m", "zfsobs"]
LIBS = find_libraries()
needs_lib = pytest.mark.skipif(not LIBS, reason="needs an installed libzpool")
ROOT_AND_SETPRIV = os.geteuid() == 0 and shutil.which("setpriv")
needs_nobody = pytest.mark.skipif(not ROOT_AND_SETPRIV, reason="needs root and setpriv (a real other user)")
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
# the attack of issue 41: the tail makes the rest of the line a valid probe on the real library
INJECTED = ':spa_sync {} interval:s:1 { cat("/etc/shadow"); exit(); } uprobe:'
HOSTILE_NAMES = [INJECTED, "lib zpool.so", "a:b", "x{y}", 'q"uote', "semi;colon", "do$llar", "glob*",
                 "com,ma", "new\nline", "esc\x1b]0;title\x07", "tab\there", "back\\slash", "h#ash",
                 "caf\u00e9", "paren(1)", "ap'os"]
HOSTILE_VERSIONS = ["v0.23.2 } interval:s:1 { exit(); }", "bpftrace v0.17.0\n} BEGIN { system(\"id\"); }",
                    "99999999999999999999.1.1", "\x1b[2J", "v0.20.0\x00"]
ODD_BUT_VALID_POOLS = ["tank", "my pool", "a:b.c-d_e", "z" * 255]
HOSTILE_POOLS = ['x" || 1 == 1 || "', "0tank", "-tank", "t/ank", "t\nank", "mirror1", "log", "spare",
                 "ta%nk", "t\x1bank", "", "z" * 256, "t\u00e4nk"]


def signature(text: str, lib: str = "") -> tuple:
    """A script's program, as far as an injection could change it: its probe headers (lines at
    brace depth 0 that are code), with the library path as LIB, and its count of braces."""
    heads, depth, braces = [], 0, 0
    in_comment = False
    for line in text.splitlines():
        code = line.strip()
        if in_comment or code.startswith("/*"):
            in_comment = "*/" not in code
            continue
        if not code or code.startswith("//"):
            continue
        if depth == 0 and not code.startswith("}"):
            heads.append(code.replace(lib, "LIB") if lib else code)
        depth += code.count("{") - code.count("}")
        braces += code.count("{") + code.count("}")
    return tuple(sorted(heads)), braces


def render_or_refuse(name, target, bpftrace=""):
    try:
        return probes.render(name, target, bpftrace)
    except ZfsobsError as exc:
        assert "\n" not in str(exc), exc
        return None


def hostile_copy(root: str, name: str, lib: str) -> str:
    """A root-owned copy of `lib` whose resolved path ends in `name` (a '/' in it is a directory).
    For the attack, ROOT/d/a is a copy too: the script's first uprobe attaches there."""
    if name == INJECTED:
        os.makedirs(os.path.join(root, "d"))
        shutil.copy(lib, os.path.join(root, "d", "a"))
        path = os.path.join(root, "d", "a" + name + lib)
    else:
        path = os.path.join(root, "d", name, "libzpool.so")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    shutil.copy(lib, path)
    return path


def test_the_signature_sees_an_injection():
    """Not vacuous: the attack's path put into a rendered script changes its signature."""
    ref = probes.render("txg", _fake_lib()).text
    assert signature(ref, "/lib/x") != signature(ref.replace("/lib/x:", "/lib/x" + INJECTED + "/lib/x:"), "/lib/x")


def probes_functions() -> set[str]:
    return set(libzpool(LIBS[-1]).functions) if LIBS else {"spa_sync"}


def _fake_lib() -> Target:
    """A libzpool target at /lib/x with the installed library's symbols (or txg's alone)."""
    t = Target("libzpool", "/lib/x", "2.1.11")
    real = libzpool(LIBS[-1]) if LIBS else None
    t.__dict__["symbols"] = dict(real.symbols) if real else {f: ("func", 0x1000 + i) for i, f in
                                                            enumerate(sorted(probes_functions()))}
    t.__dict__["got_slots"] = dict(real.got_slots) if real else {}
    return t


@pytest.mark.parametrize("name", probes.available())
def test_every_probe_refuses_a_hostile_library_path_in_a_target(name):
    """The second guard: a Target built with a hostile path (not through libzpool()) renders nothing."""
    good = _fake_lib()
    for hostile in HOSTILE_NAMES:
        bad = Target("libzpool", "/lib/x" + hostile, "2.1.11")
        bad.__dict__.update(symbols=good.symbols, got_slots=good.got_slots)
        if render_or_refuse(name, good) is None:
            continue                                   # not traceable on this build either way
        with pytest.raises(ZfsobsError) as exc:
            probes.render(name, bad)
        assert "a probe script takes only" in str(exc.value) and "\n" not in str(exc.value)


@needs_lib
@pytest.mark.parametrize("hostile", HOSTILE_NAMES)
def test_a_hostile_library_name_is_refused_before_anything_reads_it(hostile, tmp_path):
    copy = hostile_copy(str(tmp_path), hostile, LIBS[-1])
    link = tmp_path / "innocent-libzpool.so"
    link.symlink_to(copy)
    for given in (copy, str(link)):
        with pytest.raises(ZfsobsError) as exc:
            libzpool(given)
        assert "may hold only A-Z a-z 0-9 . _ / + -" in str(exc.value) and "\n" not in str(exc.value)


@needs_lib
@pytest.mark.parametrize("name", probes.available())
def test_every_probe_renders_the_same_program_for_every_benign_value(name, tmp_path):
    """The installed library, a copy at a path with every character allowed, the kernel, each
    with bpftrace versions that print code: one program (headers, braces) per target kind."""
    odd = tmp_path / "a+b-c_d.e" / "libzpool.so.5"
    odd.parent.mkdir()
    shutil.copy(LIBS[-1], odd)
    for target in (libzpool(LIBS[-1]), libzpool(str(odd)), kernel_target(probes_functions())):
        ref = render_or_refuse(name, target)
        for version in ("", "v0.17.0", "v0.23.2", *HOSTILE_VERSIONS):
            got = render_or_refuse(name, target, version)
            assert (got is None) == (ref is None), (target.name, version)
            if got is not None:
                assert signature(got.text, target.path) == signature(ref.text, target.path), (target.name, version)
                assert not any(v.strip() and v in got.text for v in HOSTILE_VERSIONS)


@pytest.mark.parametrize("path", [p for d in D_DIRS for p in sorted((probes_dir() / d).glob("*.d"))],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_d_script_keeps_its_program_and_a_pool_stays_one_argument(path):
    """D: no value from the command line goes into the text; -p's pool is dtrace's $$1, one
    argument, and only a name zpool(8) allows gets there."""
    text = script_text(path)
    consts = {n: 1 for n in re.findall(r"\bCONST\((\w+)\)", text)}
    for system in ("Linux", "SunOS", "FreeBSD"):
        rendered = for_system(text, system, lambda: consts)
        assert signature(rendered) == signature(for_system(text, system, lambda: {n: 2 for n in consts})), system
        if consts:        # a value from the module that is not an integer never becomes text
            with pytest.raises(ZfsobsError):
                for_system(text, system, lambda: {n: "1; }" for n in consts})
    for pool in ODD_BUT_VALID_POOLS:
        argv = command_line("dtrace", str(path), pool_name(pool))
        assert argv == ["dtrace", "-q", "-Z", "-s", str(path), pool, "1"]
    for pool in HOSTILE_POOLS:
        with pytest.raises(ZfsobsError) as exc:
            pool_name(pool)
        assert "\n" not in str(exc.value)


def one_line_refusal(res, pattern=""):
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert len(lines) == 1 and lines[0].startswith("zfsobs: ") and pattern in lines[0], res.stderr


@pytest.mark.parametrize("cmd", [["top"], ["record", "-O", "{tmp}/x.cap"], ["vqstat"], ["zilstat"]])
def test_a_hostile_pool_name_is_one_line(cmd, tmp_path):
    args = [a.replace("{tmp}", str(tmp_path)) for a in cmd]
    res = subprocess.run(ZFSOBS + args + ["-p", 'x" || 1 == 1 || "', "--target", "libzpool"],
                         capture_output=True, text=True, timeout=120)
    one_line_refusal(res, "not a pool name")
    assert not (tmp_path / "x.cap").exists()


def fake_bpftrace(tmp_path, version="bpftrace v0.17.0"):
    """A bpftrace that says its version and logs any other run (a script it was given)."""
    fake, log = tmp_path / "bpftrace", tmp_path / "bpftrace.log"
    fake.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && {{ printf '%s\\n' '{version}'; exit 0; }}\n"
                    f"echo \"ran: $*\" >> {log}\nexit 1\n")
    fake.chmod(0o755)
    return fake, log


@needs_lib
def test_a_bpftrace_whose_version_prints_code_changes_no_program(tmp_path):
    fake, _ = fake_bpftrace(tmp_path, 'bpftrace v0.23.2 } BEGIN { system("id"); }')
    env = dict(os.environ, ZFSOBS_BPFTRACE=str(fake))
    shown = subprocess.run(ZFSOBS + ["probes", "show", "zil", "--target", LIBS[-1]], capture_output=True,
                           text=True, timeout=120, env=env)
    ref = probes.render("zil", libzpool(LIBS[-1]), "v0.23.2").text
    assert shown.returncode == 0 and signature(shown.stdout) == signature(ref) and "system(" not in shown.stdout


@needs_lib
@needs_nobody
def test_the_attack_a_users_symlink_to_a_library_whose_name_is_code(tmp_path):
    """Issue 41's attack, for real: `nobody` links to a root-owned libzpool copy whose resolved
    path holds `:spa_sync {} interval:s:1 { cat("/etc/shadow"); ... } uprobe:...`. On the old code
    `probes show` printed that program (bpftrace ran it and printed /etc/shadow) and `record`
    started bpftrace on it; now both refuse with one line and no bpftrace runs."""
    copy = hostile_copy(str(tmp_path), INJECTED, LIBS[-1])
    theirs = tempfile.mkdtemp(prefix="zfsobs-test-nobody-")
    try:
        nobody = pwd.getpwnam("nobody")
        os.chown(theirs, nobody.pw_uid, nobody.pw_gid)
        link = os.path.join(theirs, "libzpool.so")
        subprocess.run(NOBODY + ["ln", "-s", copy, link], check=True, timeout=30)
        assert os.lstat(link).st_uid == nobody.pw_uid and INJECTED in os.path.realpath(link)
        fake, log = fake_bpftrace(tmp_path)
        env = dict(os.environ, ZFSOBS_BPFTRACE=str(fake))
        for spec in (link, "libzpool:" + link):
            shown = subprocess.run(ZFSOBS + ["probes", "show", "txg", "--target", spec], capture_output=True,
                                   text=True, timeout=120, env=env)
            one_line_refusal(shown, "a library path may hold only")
            assert shown.stdout == ""
        cap = tmp_path / "x.cap"
        rec = subprocess.run(ZFSOBS + ["record", "--target", link, "-O", str(cap), "--duration", "2"],
                             capture_output=True, text=True, timeout=120, env=env)
        one_line_refusal(rec, "a library path may hold only")
        assert not log.exists(), log.read_text()        # bpftrace never ran a script
        assert not cap.exists()
        # a benign-named copy that `nobody` owns (they could rewrite it under root's trace): refused
        mine = os.path.join(theirs, "own")
        subprocess.run(NOBODY + ["sh", "-c", f"mkdir {mine} && cp {LIBS[-1]} {mine}/libzpool.so"],
                       check=True, timeout=60)
        res = subprocess.run(ZFSOBS + ["probes", "show", "txg", "--target", f"{mine}/libzpool.so"],
                             capture_output=True, text=True, timeout=120, env=env)
        one_line_refusal(res, "owned by uid")
    finally:
        shutil.rmtree(theirs, ignore_errors=True)


@needs_lib
@pytest.mark.parametrize("spoil, says", [
    (lambda p: os.chmod(p, 0o666), "writable by others"),
    (lambda p: os.chmod(os.path.dirname(p), 0o777), "another user could replace the library"),
    (lambda p: os.chown(p, 65534, 65534), "owned by uid 65534"),
    (lambda p: os.chown(os.path.dirname(p), 65534, 65534), "another user could replace the library"),
])
def test_a_library_another_user_could_replace_is_refused(spoil, says, tmp_path):
    if os.geteuid() != 0 and "chown" in says:
        pytest.skip("needs root")
    lib = tmp_path / "lib" / "libzpool.so"
    lib.parent.mkdir()
    shutil.copy(LIBS[-1], lib)
    assert libzpool(str(lib)).path == str(lib)
    spoil(str(lib))
    with pytest.raises(ZfsobsError) as exc:
        libzpool(str(lib))
    assert says in str(exc.value) and "\n" not in str(exc.value)
