"""What `zfsobs exporter` refuses before anything starts: an address without a host, one that is
not an address, one in use or not on this host, and a web config file it cannot honour. Each is
one `zfsobs: ...` line and a non-zero status, within seconds, with `--lab` given (the lab would
take far longer to start than the bound). And a vdev queue line of an I/O class zfsobs has no
name for (a newer ZFS's tenth) is counted, not an exception in the exporter's families."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

from prom_server import free_port
from zfsobs.capture import read_capture
from zfsobs.events import Parser, parse_all
from zfsobs.model import Model
from zfsobs.views.prometheus import families

ZFSOBS = [sys.executable, "-m", "zfsobs", "exporter", "--lab", "--lab-time", "5"]


def refused(*args, cwd=None) -> str:
    start = time.time()
    r = subprocess.run(ZFSOBS + list(args), capture_output=True, text=True, timeout=60, cwd=cwd)
    took = time.time() - start
    lines = r.stderr.strip().splitlines()
    assert r.returncode not in (0, 70) and len(lines) == 1 and lines[0].startswith("zfsobs: "), (r.returncode, r.stderr)
    assert "lab" not in r.stdout and took < 5, (took, r.stdout)
    return lines[0]


def test_listen_without_a_host_is_refused_with_the_explicit_spelling():
    line = refused("--listen", ":9976")
    assert "0.0.0.0:9976" in line and "[::]:9976" in line


@pytest.mark.parametrize("listen, says", [
    ("999.1.1.1:80", "not an IPv4 address"),
    ("192.0.2.1:9976", "Cannot assign requested address"),      # TEST-NET-1: on no host
    ("::1:9976", "in brackets"),
    ("[nonsense]:9976", "not an IPv6 address"),
    ("bad_host!:9976", "not an address or a host name"),
    ("127.0.0.1:99999", "want HOST:PORT"),
])
def test_a_bad_address_is_one_line_before_the_lab(listen, says):
    assert says in refused("--listen", listen)


def test_a_port_in_use_is_one_line_before_the_lab():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert "Address already in use" in refused("--listen", f"127.0.0.1:{port}")


@pytest.mark.parametrize("text, says", [
    ("tls_server_config:\n  cert_file: a\n  keyfile: b\n", "unknown key 'keyfile'"),
    ("tls_srever_config: {}\n", "unknown key 'tls_srever_config'"),
    ("rate_limit:\n  interval: 1s\n", "not supported"),
    ("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n", "cannot load cert_file"),
    ("tls_server_config:\n  key_file: k\n", "cert_file is required"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAnyClientCert\n", "not supported"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: SSL3\n", "min_version"),
    ("tls_server_config:\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n", "not supported"),
    ("basic_auth_users:\n  alice: plaintext\n", "not a bcrypt hash"),
    ("http_server_config:\n  headers:\n    Set-Cookie: x\n", "Set-Cookie"),
    ("http_server_config:\n  headers:\n    X-Frame-Options: allowall\n", "X-Frame-Options"),
    ("[unclosed\n", "not YAML"),
    ("- a list\n", "want a mapping"),
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", "not YAML"),
])
def test_a_web_config_it_cannot_honour_is_one_line_before_the_lab(tmp_path, text, says):
    (tmp_path / "web.yml").write_text(text)
    assert says in refused("--listen", f"127.0.0.1:{free_port()}", "--web-config-file", str(tmp_path / "web.yml"))


def test_a_web_config_that_is_not_a_file_is_one_line(tmp_path):
    assert "No such file" in refused("--web-config-file", str(tmp_path / "absent.yml"))
    assert "not a regular file" in refused("--web-config-file", str(tmp_path))
    import os
    os.mkfifo(tmp_path / "fifo")
    assert "not a regular file" in refused("--web-config-file", str(tmp_path / "fifo"))


@pytest.mark.parametrize("cls", [9, 99])
def test_a_vq_line_of_an_unknown_class_is_counted_not_raised(capture_path, cls):
    lines = list(read_capture(capture_path).lines)
    at = next(i for i, line in enumerate(lines) if " vq " in line and " class=0 " in line)
    lines.insert(at + 1, lines[at].replace(" class=0 ", f" class={cls} "))
    model = Model(keep=None)
    for ev in parse_all(lines, Parser()):
        model.feed(ev)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(type("Fams", (), {"collect": lambda self: families(model, {"version": "t"})})())
    text = generate_latest(registry).decode()
    assert "zfsobs_vdev_queue_unknown_class_events_total 1.0" in text
    assert 'priority="sync_read"' in text and f'priority="{cls}"' not in text


def test_an_ipv6_literal_in_brackets_and_a_name_bind():
    from zfsobs.views import listen
    for text, family in ((f"[::1]:{free_port()}", socket.AF_INET6), (f"localhost:{free_port()}", None)):
        try:
            sock = listen.bind(text)
        except Exception as exc:
            if "::1" in text and "Cannot assign" in str(exc):
                continue        # a host without IPv6 loopback
            raise
        with sock:
            assert family is None or sock.family == family
