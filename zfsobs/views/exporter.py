"""`zfsobs exporter`: the live model on /metrics for Prometheus (docs/prometheus.md).

prometheus_client serves it, and picks Prometheus text or OpenMetrics by the scraper's Accept
header. The session's loop (main thread) makes a snapshot of the families twice a second; the
HTTP thread only hands the latest one out, so a scrape never reads the model while it changes."""
from __future__ import annotations

import signal
import sys
import threading

from prometheus_client.exposition import start_http_server
from prometheus_client.registry import CollectorRegistry

from zfsobs import __version__
from zfsobs.cli_parser import DEFAULT_LISTEN
from zfsobs.errors import ZfsobsError
from zfsobs.views.prometheus import families


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ZfsobsError(f"--listen {text}: want HOST:PORT, e.g. {DEFAULT_LISTEN}")
    return host.strip("[]") or "0.0.0.0", int(port)


class Snapshot:
    """The collector prometheus_client calls on each scrape."""

    def __init__(self):
        self.latest: list = []

    def collect(self):
        return self.latest


def serve(session, listen: str):
    """Serve while the session runs; the server, still up, for linger() or shutdown()."""
    host, port = parse_listen(listen)
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
    try:
        server, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ZfsobsError(f"cannot listen on {listen}: {exc.strerror or exc}") from None
    print(f"zfsobs: serving /metrics on http://{listen}/metrics", file=sys.stderr, flush=True)
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
