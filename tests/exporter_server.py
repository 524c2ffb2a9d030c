"""The exporter's server (zfsobs/views/http_server.py, listen.py, web_config.py) as a process of its
own for the tests: `python exporter_server.py HOST:PORT TICKS [WEB_CONFIG]`. It serves a registry
with a known gauge and the server's own counters, under the default limit of 1024 descriptors,
while its main thread stands for the recording: it appends a line to TICKS every 0.1 s."""
from __future__ import annotations

import resource
import sys
import time

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry

from zfsobs.errors import ZfsobsError
from zfsobs.views import listen, web_config
from zfsobs.views.http_server import Server


class Known:
    def collect(self):
        g = GaugeMetricFamily("zfsobs_test_value", "A known value", labels=["zpool"])
        g.add_metric(["tank"], 42.5)
        return [g]


def main() -> int:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    try:
        web = web_config.load(sys.argv[3] if len(sys.argv) > 3 else None)
        sock = listen.bind(sys.argv[1])
    except ZfsobsError as exc:
        print(f"zfsobs: {exc}", file=sys.stderr)
        return 2
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Known())
    server = Server(sock, registry, web)
    registry.register(server)
    print("serving", file=sys.stderr, flush=True)
    with open(sys.argv[2], "a") as ticks:
        while True:
            ticks.write(f"{time.monotonic()}\n")
            ticks.flush()
            time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
