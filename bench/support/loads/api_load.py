"""Load generators for `python -m bench api`: wrk (saturation) and h2load (fixed request rate,
per-request latencies from its log file), plus the API server subprocess."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from bench.support.harness import ROOT, progress


def need(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if path is None:
        raise SystemExit(f"bench api: {binary} not found (apt-get install -y {package})")
    return path


class ApiServer:
    """`python -m bench.support.parts.api_server` with the given PRECAST_* environment."""

    def __init__(
        self, port: int, env: dict[str, str], devices: int, cpus: str | None = None
    ) -> None:
        self.port, self.url = port, f"http://127.0.0.1:{port}"
        self.log = Path(tempfile.mkdtemp(prefix="bench-api-")) / "server.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    *_pin(cpus),
                    sys.executable,
                    "-m",
                    "bench.support.parts.api_server",
                    str(port),
                    str(devices),
                ],
                env={**os.environ, **env},
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float = 120.0) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise SystemExit(f"bench api: server exited: {self.log.read_text()[-2000:]}")
            try:
                if urllib.request.urlopen(self.url + "/readyz", timeout=1).status == 200:
                    return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(0.1)
        raise SystemExit("bench api: server not ready in time")

    def metric(self, name: str, labels: str = "") -> float:
        text = urllib.request.urlopen(self.url + "/metrics", timeout=5).read().decode()
        m = re.search(rf"^{re.escape(name)}{re.escape(labels)} ([0-9.e+]+)$", text, re.M)
        return float(m.group(1)) if m else 0.0

    def cpu_s(self) -> float:
        """CPU seconds the server process has used (all its threads: user + system). Per request,
        it measures the server's cost without the wait for a CPU that a shared machine adds."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _pin(cpus: str | None) -> list[str]:
    """`taskset -c CPUS` to keep a process on its own core(s), or nothing."""
    return [] if not cpus else [need("taskset", "util-linux"), "-c", cpus]


def wrk(
    url: str,
    paths: list[str],
    seconds: float,
    connections: int = 32,
    cpus: str | None = None,
    threads: int = 1,
) -> tuple[float, int]:
    """Saturation throughput: (req/s, requests), requests spread over `paths` (each of the
    `threads` goes through them in order)."""
    need("wrk", "wrk")
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(
            "local paths = {" + ",".join(f'"{p}"' for p in paths) + "}\n"
            "local i = 0\nrequest = function()\n  i = i % #paths + 1\n"
            "  return wrk.format(nil, paths[i])\nend\n"
        )
    out = subprocess.run(
        [
            *_pin(cpus),
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{seconds:g}s",
            "-s",
            f.name,
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    os.unlink(f.name)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        raise SystemExit(f"bench api: wrk saw {non2xx.group(1)} errors on {url}{paths[0]}")
    rps, count = re.search(r"Requests/sec:\s+([0-9.]+)", out), re.search(r"(\d+) requests in", out)
    if rps is None or count is None:
        raise SystemExit(f"bench api: wrk printed no summary for {url}{paths[0]}:\n{out}")
    return float(rps.group(1)), int(count.group(1))


def fixed_rate(
    url: str,
    paths: list[str],
    rate: int,
    seconds: float,
    cpus: str | None = None,
    connections: int | None = None,
) -> dict[str, float]:
    """Latency at a fixed request rate, from every request (`fixed_rate_log`)."""
    rows = fixed_rate_log(url, paths, rate, seconds, cpus, connections)
    ok = rows[rows[:, 1] < 400]
    lat_ms = ok[:, 2] / 1000.0
    starts = np.sort(rows[:, 0])
    span_s = (starts[-1] - starts[0]) / 1e6 if len(rows) > 1 else seconds
    return {
        "rate": rate,
        "achieved": len(rows) / max(span_s, 1e-9),
        "errors": int(len(rows) - len(ok)),
        "p50": float(np.percentile(lat_ms, 50)),
        "p99": float(np.percentile(lat_ms, 99)),
        "p999": float(np.percentile(lat_ms, 99.9)),
        "n": int(len(rows)),
        "bunched": float((np.diff(starts) < 20).mean()) if len(rows) > 1 else 0.0,
    }


def fixed_rate_log(
    url: str,
    paths: list[str],
    rate: int,
    seconds: float,
    cpus: str | None = None,
    connections: int | None = None,
) -> np.ndarray:
    """Every request of a fixed request rate: h2load's per-request log, one row each of
    (start us, HTTP status, latency us).

    h2load paces each connection with its own timer from the moment it connects; connections
    opened together fire together, so N connections at rate/N each send N requests at once
    every N/rate seconds (measured here: 90 % of gaps between requests under 20 us, p50 at
    1,000/s three times higher than with spread arrivals). So connections open one per
    millisecond (`-r 1 --rate-period 1ms`) and each paces at a period that is not a whole number
    of milliseconds (clients = rate/100 + 1), which spreads their phases evenly over the period,
    as with many independent browsers. h2load's event loop still wakes about once a millisecond,
    so requests due within one millisecond leave together (`bunched`: the share of gaps under
    20 us, reported). Each connection waits ~10 ms between its requests, so a slow answer
    delays almost nothing behind it.

    `connections` overrides that count: a few keep-alive connections carrying the whole rate is
    how a reverse proxy's upstream pool reaches the API; measured here, 101 connections at 10k/s
    gave ~10x the p50 of 20 connections, with the server's CPU the same. With fewer connections
    a request queued behind a slow one on its connection is timed from when it is sent, so the
    many-connection figure is reported beside it."""
    need("h2load", "nghttp2-client")
    clients = connections or max(1, min(201, rate // 100 + 1))
    per_client = max(1, round(rate * seconds / clients))
    with tempfile.TemporaryDirectory() as d:
        uris, log = Path(d, "uris"), Path(d, "log")
        uris.write_text("".join(f"{url}{p}\n" for p in paths))
        subprocess.run(
            [
                *_pin(cpus),
                "h2load",
                "--h1",
                "-c",
                str(clients),
                "-t",
                "1",
                "--rps",
                f"{rate / clients:.6f}",
                "-n",
                str(per_client * clients),
                "-r",
                "1",
                "--rate-period",
                "1ms",
                "-i",
                str(uris),
                "--log-file",
                str(log),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return np.loadtxt(log, dtype=np.int64, ndmin=2)


def zipf_paths(devices: list[str], n: int, s: float = 1.1, seed: int = 7) -> list[str]:
    """A UI read pattern: a few devices are looked at constantly, most rarely."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, len(devices) + 1, dtype=np.float64)
    p = ranks**-s
    picks = rng.choice(len(devices), size=n, p=p / p.sum())
    order = rng.permutation(len(devices))  # popularity unrelated to the ID
    return [f"/v1/devices/{devices[order[i]]}/prediction" for i in picks]


def progress_line(msg: str) -> None:
    progress(msg)
