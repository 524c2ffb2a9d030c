"""`zfsobs exporter --lab` (real bpftrace on the real lab, recording with -O) under the default
1024-descriptor limit, serving over TLS with basic auth from a web config, while a real
Prometheus scrapes it over https every second: 1100 half-open requests are held open against it
for 20 s. The run goes on (the lab, the recording and the model: Prometheus's events counter
keeps rising through the flood), a scrape answers once the idle ones time out, and the run ends
as the lab ends, status 0, with a valid capture. Before the bounded server, this flood ended the
whole run (`OSError: Too many open files`)."""
from __future__ import annotations

import resource
import signal
import socket
import subprocess
import sys
import time

import bcrypt
import pytest

from conftest import lab_ready, lab_run, ztest_lived
from prom_server import Prometheus, free_port, missing, wait_for
from test_exporter_tls import PASSWORD, get, make_certs
from zfsobs.capture import read_capture

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready() or missing()), reason=lab_ready() or missing() or "ok")]

ZFSOBS = [sys.executable, "-m", "zfsobs"]
FLOOD, HOLD_S = 1100, 20


def default_fd_limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def events(server) -> float:
    return sum(server.query('zfsobs_events_total{job="zfsobs"}').values())


@lab_run
def test_a_flood_of_idle_clients_does_not_stop_the_exporter(tmp_path):
    make_certs(tmp_path)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()
    (tmp_path / "web.yml").write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                                      f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    port, cap, err = free_port(), tmp_path / "run.cap", tmp_path / "exporter.err"
    job = {"job_name": "zfsobs", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}], "scheme": "https",
           "tls_config": {"ca_file": str(tmp_path / "ca.crt")},
           "basic_auth": {"username": "prometheus", "password": PASSWORD}}
    server = Prometheus(tmp_path, jobs=[job])
    with open(err, "w") as errf:
        proc = subprocess.Popen(ZFSOBS + ["exporter", "--lab", "--lab-time", "60", "--listen", f"127.0.0.1:{port}",
                                          "--web-config-file", str(tmp_path / "web.yml"), "-O", str(cap)],
                                stdout=subprocess.DEVNULL, stderr=errf, preexec_fn=default_fd_limit)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    idle = []
    try:
        wait_for(err, "serving /metrics", proc, 120)
        deadline = time.time() + 30
        while not events(server) and time.time() < deadline:
            time.sleep(1)
        before = events(server)
        assert before > 0, "Prometheus got no scrape before the flood"
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 4096), hard), hard))
        for _ in range(FLOOD):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.send(b"\x16\x03\x01")             # the start of a TLS record, never finished
            idle.append(s)
        flooded = time.time()
        while time.time() < flooded + HOLD_S:
            if proc.poll() is not None:
                ztest_lived(err.read_text())
                raise AssertionError(err.read_text()[-2000:])
            time.sleep(1)
        for s in idle:
            s.close()
        idle = []
        deadline, status = time.time() + 60, None
        while status is None and time.time() < deadline:
            try:
                status, _, body = get(port, tmp_path / "ca.crt", "prometheus", PASSWORD)
            except OSError:
                time.sleep(1)
        assert status == 200 and "zfsobs_exporter_connections_rejected_total" in body
        time.sleep(3)
        after = events(server)
        assert after > before, f"the recording stalled: zfsobs_events_total {before} -> {after}"
        assert server.query('up{job="zfsobs"}') and list(server.query('up{job="zfsobs"}').values()) == [1.0]
        wait_for(err, "serving the last values", proc, 300)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    finally:
        for s in idle:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        server.stop()
    text = err.read_text()
    ztest_lived(text)
    assert code == 0 and "Too many open files" not in text and "Traceback" not in text, text[-2000:]
    capture = read_capture(str(cap))
    assert sum(1 for _ in capture.lines) > after * 0.5, "the capture lost the run"
