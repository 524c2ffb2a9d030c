"""The exporter's HTTP server, bounded against its clients (docs/prometheus.md, "Bounds").

One thread accepts; a fixed pool of WORKERS threads serves, each one connection at a time; at most
QUEUED accepted connections wait for a worker, and one past that is closed at once. So the server
holds at most WORKERS + QUEUED + 1 descriptors, whatever the clients do. A connection has HEAD_S
seconds from its accept to send a request head of at most MAX_HEAD bytes (a TLS handshake
included), and WRITE_S seconds to take the answer; then it is closed. An accept() that fails
(EMFILE, ENFILE, ...) is counted and retried after BACKOFF_S: nothing a client does ends the run.
Only GET and HEAD of /metrics and / are served; one request per connection."""
from __future__ import annotations

import errno
import gzip
import queue
import select
import socket
import ssl
import threading
import time
from collections import Counter

from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import choose_encoder

from zfsobs.views.web_config import WebConfig

WORKERS, QUEUED = 8, 16
HEAD_S, WRITE_S = 10.0, 30.0
MAX_HEAD = 8192
BACKOFF_S = 0.1
DRAIN, DRAIN_S = 1 << 16, 1.0
LANDING = (b"<!doctype html><html><head><title>zfsobs exporter</title></head><body><h1>zfsobs exporter</h1>"
           b"<p><a href=\"/metrics\">Metrics</a></p></body></html>\n")
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           431: "Request Header Fields Too Large", 500: "Internal Server Error"}


class Cut(Exception):
    """The connection ends here without an answer (timeout, reset, a failed handshake)."""


class Server:
    def __init__(self, sock: socket.socket, registry, web: WebConfig | None = None,
                 workers: int = WORKERS, queued: int = QUEUED, head_s: float = HEAD_S, write_s: float = WRITE_S):
        self.sock, self.registry, self.web = sock, registry, web or WebConfig()
        self.head_s, self.write_s = head_s, write_s
        self.jobs: queue.Queue = queue.Queue(maxsize=queued)
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.counts: Counter = Counter()
        sock.settimeout(0.5)        # accept() wakes to see a shutdown
        self.threads = [threading.Thread(target=self._accept, name="zfsobs-accept", daemon=True)]
        self.threads += [threading.Thread(target=self._work, name=f"zfsobs-http-{i}", daemon=True) for i in range(workers)]
        for t in self.threads:
            t.start()

    def count(self, *key) -> None:
        with self.lock:
            self.counts[key] += 1

    def shutdown(self) -> None:
        self.stopping.set()
        self.threads[0].join(5)
        self.sock.close()
        for _ in self.threads[1:]:
            try:
                self.jobs.put((None, 0), timeout=1)
            except queue.Full:
                break

    def collect(self):
        """The server's own counters (a collector on the registry it serves)."""
        with self.lock:
            counts = dict(self.counts)
        acc = CounterMetricFamily("zfsobs_exporter_connections_accepted", "Connections the exporter accepted")
        acc.add_metric([], counts.get(("accepted",), 0))
        rej = CounterMetricFamily("zfsobs_exporter_connections_rejected", "Connections closed unserved: "
                                  "every worker busy and the queue full, or accept() failed (fd limit)",
                                  labels=["reason"])
        cut = CounterMetricFamily("zfsobs_exporter_connections_cut", "Connections closed without an answer: "
                                  "no full request in time, reset, TLS handshake failed", labels=["reason"])
        req = CounterMetricFamily("zfsobs_exporter_requests", "Requests answered, by status code", labels=["code"])
        for reason in ("busy", "fd_limit", "accept_error"):
            rej.add_metric([reason], counts.get(("rejected", reason), 0))
        for reason in ("timeout", "reset", "tls"):
            cut.add_metric([reason], counts.get(("cut", reason), 0))
        for key, n in sorted(counts.items()):
            if key[0] == "request":
                req.add_metric([str(key[1])], n)
        return [acc, rej, cut, req]

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError as exc:
                if self.stopping.is_set():
                    return
                if exc.errno not in (errno.ECONNABORTED, errno.EINTR, errno.EPROTO):
                    self.count("rejected", "fd_limit" if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS,
                                                                       errno.ENOMEM) else "accept_error")
                    self.stopping.wait(BACKOFF_S)
                continue
            self.count("accepted")
            try:
                self.jobs.put_nowait((conn, time.monotonic() + self.head_s))
            except queue.Full:
                self.count("rejected", "busy")
                conn.close()

    def _work(self) -> None:
        while True:
            conn, deadline = self.jobs.get()
            if conn is None:
                return
            try:
                conn.setblocking(False)
                self._serve(conn, deadline)
            except Cut as exc:
                self.count("cut", str(exc))
            except ssl.SSLError:
                self.count("cut", "tls")
            except OSError:
                self.count("cut", "reset")
            except Exception:           # a worker outlives any one request
                self.count("request", 500)
            finally:
                conn.close()

    def _wait(self, conn, deadline: float, write: bool = False) -> None:
        left = deadline - time.monotonic()
        poll = select.poll()        # not select(): any descriptor number
        poll.register(conn, select.POLLOUT if write else select.POLLIN)
        if left <= 0 or not poll.poll(left * 1000):
            raise Cut("timeout")

    def _serve(self, conn, deadline: float) -> None:
        if self.web.tls:
            conn = self.web.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
            while True:
                try:
                    conn.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    self._wait(conn, deadline)
                except ssl.SSLWantWriteError:
                    self._wait(conn, deadline, write=True)
        head = b""
        while b"\r\n\r\n" not in head and b"\n\n" not in head:
            if len(head) > MAX_HEAD:
                return self._answer(conn, 431, b"request head too large\n")
            try:
                chunk = conn.recv(MAX_HEAD + 1 - len(head) if len(head) <= MAX_HEAD else 1)
            except (BlockingIOError, ssl.SSLWantReadError):
                self._wait(conn, deadline)
                continue
            if not chunk:
                raise Cut("reset")
            head += chunk
        if len(head.split(b"\n\n")[0].split(b"\r\n\r\n")[0]) > MAX_HEAD:
            return self._answer(conn, 431, b"request head too large\n")
        self._route(conn, head)

    def _route(self, conn, head: bytes) -> None:
        lines = head.decode("latin-1").replace("\r\n", "\n").split("\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return self._answer(conn, 400, b"bad request line\n")
        method, target = parts[0], parts[1]
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        if not self.web.authorized(headers.get("authorization")):
            return self._answer(conn, 401, b"Unauthorized\n", {"WWW-Authenticate": 'Basic realm="zfsobs"'})
        path = target.split("?", 1)[0]
        if path not in ("/", "/metrics"):
            return self._answer(conn, 404, b"Not Found: /metrics has the metrics\n")
        if method not in ("GET", "HEAD"):
            return self._answer(conn, 405, b"Method Not Allowed\n", {"Allow": "GET, HEAD"})
        if path == "/":
            return self._answer(conn, 200, LANDING, {"Content-Type": "text/html; charset=utf-8"}, method == "HEAD")
        encoder, kind = choose_encoder(headers.get("accept", ""))
        body, extra = encoder(self.registry), {"Content-Type": kind}
        if "gzip" in headers.get("accept-encoding", ""):
            body, extra["Content-Encoding"] = gzip.compress(body, 6), "gzip"
        self._answer(conn, 200, body, extra, method == "HEAD")

    def _answer(self, conn, code: int, body: bytes, extra: dict | None = None, head_only: bool = False) -> None:
        fields = {"Content-Type": "text/plain; charset=utf-8", "Content-Length": str(len(body)),
                  "Connection": "close", **self.web.headers, **(extra or {})}
        out = f"HTTP/1.1 {code} {REASONS[code]}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
        data = memoryview(out.encode("latin-1") + (b"" if head_only else body))
        deadline = time.monotonic() + self.write_s
        while data:
            try:
                data = data[conn.send(data):]
            except (BlockingIOError, ssl.SSLWantWriteError):
                self._wait(conn, deadline, write=True)
            except ssl.SSLWantReadError:
                self._wait(conn, deadline)
        self.count("request", code)
        self._drain(conn)

    def _drain(self, conn) -> None:
        """A lingering close: input the client sent past the head is read (up to DRAIN bytes, for
        DRAIN_S) before the close, or the kernel resets the connection and the answer is lost."""
        try:
            conn.shutdown(socket.SHUT_WR)
            deadline, left = time.monotonic() + DRAIN_S, DRAIN
            while left > 0:
                try:
                    chunk = conn.recv(min(left, 65536))
                except (BlockingIOError, ssl.SSLWantReadError):
                    self._wait(conn, deadline)
                    continue
                if not chunk:
                    return
                left -= len(chunk)
        except (Cut, OSError):
            pass
