"""The exporter's HTTP server against hostile clients, over real sockets: the server (the code
`zfsobs exporter` serves with) runs as its own process under the default 1024-descriptor limit
(tests/exporter_server.py) while its main thread stands for the recording. 1100 half-open requests
neither end it nor stop its main loop, a slow-loris client is cut at the head timeout, only GET and
HEAD of /metrics and / are served. test_lab_exporter_hostile.py does the same to `zfsobs exporter --lab`."""
from __future__ import annotations

import os
import resource
import select
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from prom_server import free_port
from zfsobs.views import http_server

HERE = os.path.dirname(os.path.abspath(__file__))


class Served:
    def __init__(self, tmp, web=None):
        self.port, self.ticks, self.err = free_port(), tmp / "ticks", tmp / "server.err"
        args = [sys.executable, os.path.join(HERE, "exporter_server.py"), f"127.0.0.1:{self.port}", str(self.ticks)]
        self.proc = subprocess.Popen(args + ([str(web)] if web else []), stderr=open(self.err, "w"))
        deadline = time.time() + 30
        while "serving" not in self.err.read_text():
            assert self.proc.poll() is None and time.time() < deadline, self.err.read_text()
            time.sleep(0.1)

    def ticks_now(self) -> int:
        return len(self.ticks.read_text().splitlines())

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def raw(self, data: bytes, timeout: float = 30) -> bytes:
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(data)
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        return out

    def stop(self):
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def served(tmp_path):
    s = Served(tmp_path)
    yield s
    s.stop()


def scrape(port: int, within: float) -> str:
    """/metrics, retried until it answers or `within` seconds pass."""
    deadline, last = time.time() + within, None
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return r.read().decode()
        except OSError as exc:
            last = exc
            time.sleep(0.5)
    raise AssertionError(f"no scrape answered in {within} s: {last}")


def value(text: str, series: str) -> float:
    return float(next(line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(series + " ")))


def test_1100_half_open_requests_neither_end_the_server_nor_stop_its_loop(served):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 4096), hard), hard))
    idle = []
    try:
        for _ in range(1100):
            s = socket.create_connection(("127.0.0.1", served.port), timeout=10)
            s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")      # a head never finished
            idle.append(s)
        before, peak = served.ticks_now(), 0
        for _ in range(20):
            peak = max(peak, served.fds())
            time.sleep(0.1)
        assert peak <= 20 + http_server.WORKERS + http_server.QUEUED, peak
        text = scrape(served.port, within=3 * http_server.HEAD_S + 30)
        assert served.proc.poll() is None, served.err.read_text()
        assert served.ticks_now() >= before + 10, "the main loop stalled under the flood"
        assert value(text, 'zfsobs_test_value{zpool="tank"}') == 42.5
        assert value(text, 'zfsobs_exporter_connections_rejected_total{reason="busy"}') >= 1000
        assert value(text, 'zfsobs_exporter_connections_accepted_total') >= 1100
    finally:
        for s in idle:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert "Traceback" not in served.err.read_text()


def test_a_slow_loris_client_is_cut_at_the_head_timeout(served):
    start = time.time()
    with socket.create_connection(("127.0.0.1", served.port)) as s:
        request, cut = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nUser-Agent: " + b"x" * 100, None
        for byte in request:
            try:
                s.send(bytes([byte]))
                if select.select([s], [], [], 1)[0] and s.recv(1) == b"":
                    cut = time.time() - start
                    break
            except OSError:         # reset
                cut = time.time() - start
                break
    assert cut is not None, "a client sending a byte a second kept its connection for 100 s"
    assert http_server.HEAD_S - 1 <= cut <= http_server.HEAD_S + 10, cut
    text = scrape(served.port, within=10)
    assert value(text, 'zfsobs_exporter_connections_cut_total{reason="timeout"}') >= 1


def test_only_get_and_head_of_metrics_and_the_landing_page_are_served(served):
    def status(data: bytes) -> int:
        return int(served.raw(data).split(b" ", 2)[1])

    assert status(b"GET / HTTP/1.1\r\n\r\n") == 200 and b'href="/metrics"' in served.raw(b"GET / HTTP/1.0\r\n\r\n")
    assert status(b"HEAD /metrics HTTP/1.1\r\n\r\n") == 200
    assert served.raw(b"HEAD /metrics HTTP/1.1\r\n\r\n").endswith(b"\r\n\r\n")
    assert status(b"GET /metrics?name[]=x HTTP/1.1\r\n\r\n") == 200
    assert status(b"GET /debug/pprof HTTP/1.1\r\n\r\n") == 404
    assert status(b"GET /../etc/passwd HTTP/1.1\r\n\r\n") == 404
    for method in (b"POST", b"PUT", b"DELETE", b"OPTIONS", b"TRACE"):
        assert status(method + b" /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n") == 405
    assert status(b"GARBAGE\r\n\r\n") == 400
    assert status(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") == 400
    assert status(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n") == 431
    with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{served.port}/metrics", headers={
            "Accept": "application/openmetrics-text; version=1.0.0"}), timeout=10) as r:
        assert r.headers["Content-Type"].startswith("application/openmetrics-text") and r.read().endswith(b"# EOF\n")
    assert served.proc.poll() is None
