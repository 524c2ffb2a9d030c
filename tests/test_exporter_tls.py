"""TLS and basic auth from an exporter-toolkit web config (zfsobs/views/web_config.py): a real
Prometheus (Debian's 2.42) scrapes the exporter's server (tests/exporter_server.py) over https,
verifying the certificate against the test's own CA, with basic auth: up is 1 and the value is
the served one; with a wrong password the server answers 401 and Prometheus's up is 0."""
from __future__ import annotations

import base64
import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import bcrypt
import pytest

from prom_server import Prometheus, free_port, missing
from test_exporter_http import Served
from zfsobs.views import exporter

PASSWORD = "s3cret pass"


def make_certs(tmp):
    """A CA and a server certificate for 127.0.0.1 signed by it (openssl, as an operator would)."""
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
        "-subj", "/CN=zfsobs test CA", "-keyout", "ca.key", "-out", "ca.crt")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "server.key", "-out", "server.csr")
    (tmp / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
        "-extfile", "ext.cnf", "-out", "server.crt")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=prometheus",
        "-keyout", "client.key", "-out", "client.csr")
    (tmp / "client.cnf").write_text("extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n")
    run("x509", "-req", "-in", "client.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
        "-extfile", "client.cnf", "-out", "client.crt")


@pytest.fixture(scope="module")
def tls_served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tls")
    make_certs(tmp)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()
    (tmp / "web.yml").write_text(
        "# an exporter-toolkit web config\n"
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS12\n"
        "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    s = Served(tmp, web=tmp / "web.yml")
    yield tmp, s
    s.stop()


def get(port, ca, user=None, password=None):
    req = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if user:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    with urllib.request.urlopen(req, timeout=10, context=ssl.create_default_context(cafile=str(ca))) as r:
        return r.status, r.headers, r.read().decode()


def test_https_with_basic_auth_answers_and_refuses(tls_served):
    tmp, s = tls_served
    status, headers, body = get(s.port, tmp / "ca.crt", "prometheus", PASSWORD)
    assert status == 200 and 'zfsobs_test_value{zpool="tank"} 42.5' in body
    assert headers["X-Content-Type-Options"] == "nosniff"
    for user, password in (("prometheus", "wrong"), ("nobody", PASSWORD), (None, None), ("prometheus", "x" * 200)):
        with pytest.raises(urllib.error.HTTPError) as exc:
            get(s.port, tmp / "ca.crt", user, password)
        assert exc.value.code == 401 and exc.value.headers["WWW-Authenticate"].startswith("Basic")
    with pytest.raises(OSError):         # plain HTTP to the TLS port: no answer, a reset
        urllib.request.urlopen(f"http://127.0.0.1:{s.port}/metrics", timeout=10)
    assert s.proc.poll() is None


@pytest.mark.skipif(bool(missing()), reason=missing() or "ok")
def test_prometheus_scrapes_over_https_with_basic_auth(tls_served):
    tmp, s = tls_served
    target = {"static_configs": [{"targets": [f"127.0.0.1:{s.port}"]}], "scheme": "https",
              "tls_config": {"ca_file": str(tmp / "ca.crt")}}
    jobs = [dict(target, job_name="good", basic_auth={"username": "prometheus", "password": PASSWORD}),
            dict(target, job_name="bad", basic_auth={"username": "prometheus", "password": "wrong"})]
    server = Prometheus(tmp, jobs=jobs)
    try:
        deadline, up = time.time() + 60, {}
        while time.time() < deadline:
            up = {dict(k)["job"]: v for k, v in server.query("up").items()}
            value = server.query('zfsobs_test_value{job="good"}')
            if up.get("good") == 1 and "bad" in up and value:
                break
            time.sleep(1)
        assert up == {"good": 1.0, "bad": 0.0}, (up, json.dumps(server.api("targets")))
        assert list(value.values()) == [42.5] and dict(next(iter(value)))["zpool"] == "tank"
        bad = [t for t in server.api("targets")["activeTargets"] if t["labels"]["job"] == "bad"]
        assert "401" in bad[0]["lastError"], bad
    finally:
        server.stop()


def test_a_required_client_certificate_is_verified(tmp_path):
    make_certs(tmp_path)
    (tmp_path / "web.yml").write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                                      "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n")
    s = Served(tmp_path, web=tmp_path / "web.yml")
    try:
        url = f"https://127.0.0.1:{s.port}/metrics"
        ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        with pytest.raises(OSError):        # no client certificate: the handshake fails
            urllib.request.urlopen(url, timeout=10, context=ctx).read()
        ctx.load_cert_chain(str(tmp_path / "client.crt"), str(tmp_path / "client.key"))
        with urllib.request.urlopen(url, timeout=10, context=ctx) as r:
            assert r.status == 200 and b"zfsobs_test_value" in r.read()
    finally:
        s.stop()


def test_basic_auth_over_plain_http_warns(tmp_path, capsys):
    hashed = bcrypt.hashpw(b"x", bcrypt.gensalt(rounds=4)).decode()
    (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  u: '{hashed}'\n")
    sock, web = exporter.prepare(SimpleNamespace(web_config_file=str(tmp_path / "web.yml"),
                                                 listen=f"127.0.0.1:{free_port()}"))
    sock.close()
    assert web.users and web.tls is None and "basic auth over plain HTTP" in capsys.readouterr().err
