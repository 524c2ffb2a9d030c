"""A real Prometheus server for the tests (Debian's `prometheus` package, 2.42: scripts/setup
installs it): its own config and data directory, a free loopback port, stopped after."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

from conftest import ztest_lived


def missing() -> str:
    """Why Prometheus cannot run here ('' if it can)."""
    for tool in ("prometheus", "promtool"):
        if not shutil.which(tool):
            return f"no {tool} (scripts/setup installs Debian's prometheus package)"
    return ""


def wait_for(path, text, proc, timeout):
    """Wait until file PATH holds TEXT, while PROC still runs (a lab's ztest failing raises
    ZtestFailed, which @lab_run answers by running the lab again)."""
    deadline = time.time() + timeout
    while text not in path.read_text():
        if proc.poll() is not None:
            ztest_lived(path.read_text())
            raise AssertionError(path.read_text()[-2000:])
        assert time.time() < deadline, f"no {text!r} in {timeout} s: {path.read_text()[-2000:]}"
        time.sleep(0.3)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, tmp: Path, data: Path | None = None, scrape: str | None = None, jobs: list | None = None):
        """A server on `data` (a fresh directory if None), scraping `scrape` (HOST:PORT) every second,
        and any further scrape configs in `jobs`."""
        self.dir = tmp
        self.data = data or tmp / "data"
        self.port = free_port()
        cfg = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": []}
        if scrape:
            cfg["scrape_configs"].append({"job_name": "zfsobs", "static_configs": [{"targets": [scrape]}]})
        cfg["scrape_configs"] += jobs or []
        (tmp / "prometheus.yml").write_text(json.dumps(cfg))      # YAML is a superset of JSON
        self.log = open(tmp / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={self.data}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=100y"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise RuntimeError(f"prometheus did not start: {(tmp / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.3)

    def api(self, path: str, **params) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = json.load(r)
        except urllib.error.HTTPError as exc:
            body = json.load(exc)
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> dict:
        """Instant vector as {frozenset(labels): value}."""
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        return {frozenset(r["metric"].items()): float(r["value"][1]) for r in self.api("query", **params)["result"]}

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> list:
        return self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=step)["result"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
