"""`precast demo`: the whole pipeline on the local stack, with a live line of figures.

Starts (or reuses) the stack, ensures topics, runs the simulator, a worker, the context
aggregator, the drift monitor and the read API as child processes, registers them with the
stack's Prometheus (one file_sd targets file, removed on exit), prints the API's URL and a sample
answer, then one status line every few seconds. Ctrl-C stops every process it started, the
stack too if it started it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from opsctl.commands.base import Command
from opsctl.settings import StackCliSettings
from precast.errors import PrecastError, StackError
from precast.kafka import Admin
from precast.redis_client import wait_reachable

SAMPLE_DEVICE = "dev-000001"


@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    metrics_url: str

    @property
    def job(self) -> str:
        """Prometheus job label (the alert rules and dashboards select on it)."""
        return f"precast-{self.name}"

    @property
    def address(self) -> str:
        return self.metrics_url.removeprefix("http://").removesuffix("/metrics")


def _scrape(url: str, names: set[str]) -> dict[str, float]:
    try:
        text = urllib.request.urlopen(url, timeout=1).read().decode()
    except (urllib.error.URLError, OSError):
        return {}
    out: dict[str, float] = {}
    # Imported here, as the stack below: every `precast` command loads this module for its flags.
    from prometheus_client.parser import text_string_to_metric_families

    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in names:
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def _spawn(name: str, module: str, env: dict[str, str], args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", module, *args], env=env, start_new_session=True)


def _stop_children(children: list[Child]) -> None:
    for c in children:
        if c.proc.poll() is None:
            os.killpg(c.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for c in children:
        try:
            c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(c.proc.pid, signal.SIGKILL)
            c.proc.wait()


def run_demo(
    settings: StackCliSettings,
    *,
    devices: int,
    rate: float,
    api_port: int,
    duration: float,
    use_stack: bool = True,
) -> int:
    from opsctl.stack import LocalStack
    from opsctl.stack.process import free_port

    # The board's URL first: an operator opens it while the stack and processes come up.
    print(
        f"board: http://127.0.0.1:{api_port}/board/   (operations center; live once the API is up)",
        flush=True,
    )
    stack = LocalStack(settings.stack)
    started: list[str] = []  # stack components this demo started, and so stops
    scraped = use_stack and settings.stack.prometheus
    env = dict(os.environ)
    if use_stack:
        before = set(stack.running())
        stack.up(progress=lambda m: print(m, flush=True), prometheus=scraped)
        started = [c for c in stack.running() if c not in before]
        # brokers, Redis (or Redis Cluster) and the replication factor the stack supports
        env.update(stack.client_env())
        kafka = settings.kafka.model_copy(update={"bootstrap_servers": stack.bootstrap_servers})
        redis_settings = settings.redis.model_copy(
            update={"url": stack.redis_url, "cluster": stack.redis_cluster is not None}
        )
        replicas = stack.settings.brokers
    else:
        kafka, redis_settings = settings.kafka, settings.redis
        replicas = settings.topics.replication_factor
    admin = Admin(kafka)
    admin.wait_reachable()
    if redis_settings.url:
        wait_reachable(redis_settings)
    topics = settings.topics.model_copy(update={"replication_factor": replicas})
    reports = admin.ensure_topics(list(topics.catalog()))
    print(
        f"topics: {sum(r.action == 'created' for r in reports)} created, contract checked",
        flush=True,
    )

    sim_port, worker_port, context_port = free_port(), free_port(), free_port()
    drift_port = free_port()
    # Children log warnings only, so the live line stays readable (PRECAST_LOG_LEVEL overrides).
    env.setdefault("PRECAST_LOG_LEVEL", "WARNING")
    children: list[Child] = []
    interrupted = False

    def _interrupt(*_: object) -> None:
        nonlocal interrupted
        interrupted = True

    old = signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        children.append(
            Child(
                "context",
                _spawn(
                    "context",
                    "workers.context.aggregator",
                    {**env, "PRECAST_METRICS__PORT": str(context_port)},
                    [],
                ),
                f"http://127.0.0.1:{context_port}/metrics",
            )
        )
        children.append(
            Child(
                "worker",
                _spawn(
                    "worker",
                    "workers.precompute.cli",
                    {**env, "PRECAST_METRICS__PORT": str(worker_port)},
                    [],
                ),
                f"http://127.0.0.1:{worker_port}/metrics",
            )
        )
        children.append(
            Child(
                "drift",
                _spawn(
                    "drift",
                    "workers.drift.cli",
                    {**env, "PRECAST_METRICS__PORT": str(drift_port)},
                    [],
                ),
                f"http://127.0.0.1:{drift_port}/metrics",
            )
        )
        children.append(
            Child(
                "api",
                _spawn("api", "consumer_api.cli", env, ["--port", str(api_port)]),
                f"http://127.0.0.1:{api_port}/metrics",
            )
        )
        # Events sent before the worker holds its partitions would wait for it and come out late:
        # a burst of freshness errors that the SLO alerts (windows still minutes long on a new
        # Prometheus) page on. The fleet starts reporting once the worker is ready.
        worker = next(c for c in children if c.name == "worker")
        _wait_ready(worker, children, lambda: interrupted)
        children.append(
            Child(
                "simulator",
                _spawn(
                    "simulator",
                    "producers.cli",
                    {
                        **env,
                        "PRECAST_METRICS__PORT": str(sim_port),
                        "PRECAST_SIMULATOR__PROGRESS_EVERY_S": "3600",
                    },
                    ["--devices", str(devices), "--rate", str(rate)],
                ),
                f"http://127.0.0.1:{sim_port}/metrics",
            )
        )
        if scraped:
            stack.prometheus.write_targets("demo", {c.job: [c.address] for c in children})
            print(
                f"Prometheus: {stack.prometheus.url} scrapes {len(children)} services "
                f"(alerts: {stack.prometheus.url}/alerts)",
                flush=True,
            )
        base = f"http://127.0.0.1:{api_port}"
        _wait_serving(base, children, lambda: interrupted)
        status, body = _get(f"{base}/v1/devices/{SAMPLE_DEVICE}/prediction")
        print(f"\nboard: {base}/board/")
        print(f"read API: {base}   (OpenAPI: {base}/openapi.json, metrics: {base}/metrics)")
        print(
            f"GET {base}/v1/devices/{SAMPLE_DEVICE}/prediction -> {status}\n{body.decode()}\n",
            flush=True,
        )
        _live(children, base, duration, lambda: interrupted)
    finally:
        signal.signal(signal.SIGINT, old)
        if scraped:
            stack.prometheus.remove_targets("demo")
        _stop_children(children)
        if started:
            stack.down(started)
            print(
                f"demo: stopped the processes and what it started of the stack ({', '.join(started)})"
            )
        else:
            print("demo: stopped its processes (the stack was already running and stays up)")
    return 0


def _wait_ready(child: Child, children: list[Child], interrupted, timeout: float = 120.0) -> None:
    url = child.metrics_url.removesuffix("/metrics") + "/readyz"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not interrupted():
        for c in children:
            if c.proc.poll() is not None:
                raise PrecastError(f"demo: {c.name} exited with code {c.proc.returncode}")
        if _get(url)[0] == 200:
            return
        time.sleep(0.2)
    if not interrupted():
        raise StackError(f"demo: the {child.name} was not ready within {timeout:g}s ({url})")


def _wait_serving(base: str, children: list[Child], interrupted, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not interrupted():
        for c in children:
            if c.proc.poll() is not None:
                raise PrecastError(f"demo: {c.name} exited with code {c.proc.returncode}")
        status, body = _get(f"{base}/v1/devices/{SAMPLE_DEVICE}/prediction")
        if status == 200 and b'"precomputed"' in body:
            return
        time.sleep(0.5)
    if not interrupted():
        raise StackError(f"demo: no precomputed answer from {base} within {timeout:g}s")


def _live(children: list[Child], base: str, duration: float, interrupted) -> None:
    names = {
        "precast_simulator_events_total",
        "precast_worker_predictions_total",
        "precast_worker_leases_total",
        "precast_worker_inferences_total",
        "precast_api_materialized_total",
        "precast_api_devices",
        "precast_context_devices",
        "precast_dead_letters_total",
        "precast_worker_consumer_lag",
    }
    started = last_t = time.monotonic()
    last: dict[str, float] = {}
    while not interrupted() and (not duration or time.monotonic() - started < duration):
        time.sleep(0.2)
        now = time.monotonic()
        if now - last_t < 2.0:
            continue
        cur: dict[str, float] = {}
        for c in children:
            cur.update(_scrape(c.metrics_url, names))
        dt = now - last_t
        rates = {n: (cur.get(n, 0) - last.get(n, 0)) / dt if last else 0.0 for n in names}
        t0 = time.perf_counter()
        status, _ = _get(f"{base}/v1/devices/{SAMPLE_DEVICE}/prediction")
        rtt = (time.perf_counter() - t0) * 1000
        events, inferences = (
            rates["precast_simulator_events_total"],
            rates["precast_worker_inferences_total"],
        )
        # Speculation's savings: events the worker would have scored one by one, per inference.
        savings = f"{events / inferences:5.1f}x" if inferences > 0 else "    -"
        # Everything published to the predictions topic (answers, the last record of a device
        # that stopped sending, validity leases): each a store write, a board update and an
        # audit leaf. Per inference: what keeping answers valid costs on top of computing them.
        records = rates["precast_worker_predictions_total"] + rates["precast_worker_leases_total"]
        per = f"{records / inferences:4.1f}" if inferences > 0 else "   -"
        print(
            f"[{now - started:6.0f}s] events {events:8,.0f}/s | inferences {inferences:7,.0f}/s "
            f"(saves {savings}) | records {records:7,.0f}/s ({per} per inference) | "
            f"worker lag {cur.get('precast_worker_consumer_lag', 0):6,.0f} | "
            f"devices served {cur.get('precast_api_devices', 0):6,.0f}, with context "
            f"{cur.get('precast_context_devices', 0):5,.0f} | dead letters "
            f"{cur.get('precast_dead_letters_total', 0):4,.0f} | "
            f"GET {status} in {rtt:4.1f} ms",
            flush=True,
        )
        for c in children:
            if c.proc.poll() is not None:
                raise PrecastError(f"demo: {c.name} exited with code {c.proc.returncode}")
        last, last_t = cur, now


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--devices", type=int, default=2_000)
    parser.add_argument(
        "--rate", type=float, default=2_000.0, help="heartbeats per second, all devices"
    )
    parser.add_argument("--port", type=int, default=8000, help="read API port")
    parser.add_argument("--duration", type=float, default=0.0, help="seconds; 0 runs until Ctrl-C")
    parser.add_argument(
        "--no-stack",
        action="store_true",
        help="use the configured Kafka and Redis (PRECAST_KAFKA__*, PRECAST_REDIS__URL) "
        "instead of starting the local stack",
    )


def run(args: argparse.Namespace, settings: StackCliSettings) -> int:
    return run_demo(
        settings,
        devices=args.devices,
        rate=args.rate,
        api_port=args.port,
        duration=args.duration,
        use_stack=not args.no_stack,
    )


COMMAND = Command(
    "demo",
    help="stack + topics + simulator + worker + API, live figures; Ctrl-C stops",
    arguments=arguments,
    run=run,
)
