"""`zfsobs exporter`: the live model on /metrics for Prometheus (docs/prometheus.md).

prometheus_client writes the exposition, Prometheus text or OpenMetrics by the scraper's Accept
header; zfsobs/views/http_server.py serves it within fixed bounds. The session's loop (main thread)
makes a snapshot of the families twice a second; the HTTP threads only hand the latest one out, so
a scrape never reads the model while it changes, and no client can slow or stop the session."""
from __future__ import annotations

import signal
import sys
import threading

from prometheus_client.registry import CollectorRegistry

from zfsobs import __version__
from zfsobs.views import listen, web_config
from zfsobs.views.http_server import Server
from zfsobs.views.prometheus import families


def prepare(args):
    """The listening socket and the web config, checked and bound before the session starts
    anything: a bad address or file is one line with nothing started."""
    web = web_config.load(args.web_config_file)
    sock = listen.bind(args.listen)
    if web.users and not web.tls:
        print("zfsobs: warning: basic auth over plain HTTP: passwords cross the network in clear text "
              "(add tls_server_config)", file=sys.stderr, flush=True)
    return sock, web


class Snapshot:
    """The collector prometheus_client calls on each scrape."""

    def __init__(self):
        self.latest: list = []

    def collect(self):
        return self.latest


def serve(session, sock, web, where: str):
    """Serve while the session runs; the server, still up, for linger() or shutdown()."""
    meta = session.source.meta
    target = meta.get("target") or {}
    info = {"version": __version__, "source": meta.get("source", "?"),
            "target": target.get("kind", "?") if isinstance(target, dict) else str(target),
            "zfs_version": target.get("zfs_version", "?") if isinstance(target, dict) else "?"}
    snap = Snapshot()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(snap)

    def update() -> bool:
        cost = session.cost.totals()
        tracers = sum(v["cpu_s"] for v in cost.values() if isinstance(v, dict) and "cpu_s" in v)
        snap.latest = families(session.model, info, {"zfsobs": cost["zfsobs_cpu_s"], session.source.tracer: tracers})
        return True

    update()
    server = Server(sock, registry, web)
    registry.register(server)
    scheme = "https" if web.tls else "http"
    print(f"zfsobs: serving /metrics on {scheme}://{where}/metrics", file=sys.stderr, flush=True)
    try:
        session.run(on_tick=update)
        update()
    except BaseException:
        server.shutdown()
        raise
    return server


def linger(server, reason: str) -> None:
    """A lab that ended by itself: its last values stay on /metrics until SIGINT or SIGTERM, so a
    scrape after the end still sees them."""
    print(f"zfsobs: {reason}; serving the last values until stopped (Ctrl-C)", file=sys.stderr, flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    while not done.wait(0.5):
        pass
    server.shutdown()
