"""`precast-worker`: consume device events, precompute top-K strategies, publish predictions.

SIGTERM/SIGINT: finish the batch in hand, predict what waits, flush, commit, exit 0.
SIGHUP: check the model registry now (hot swap without waiting for the next poll).
SIGUSR1: print every thread's stack (diagnosing a stall).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import socket
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from precast.fleet import load_fleet
from precast.kafka.access import connect_as
from precast.runtime import OneLineParser, run_cli, setup_logging
from precast.settings import load
from precast.telemetry.endpoints import start_probe
from precast.telemetry.heap import register_heap_metrics
from schemas.topics import catalog
from workers.model.inference import ModelSession
from workers.model.registry import ModelRegistry
from workers.precompute.config import LeaseConfig
from workers.precompute.leases import slack_ms
from workers.precompute.loop import LoopConfig, Worker, tune_gc
from workers.precompute.pipeline import PipelineConfig
from workers.precompute.policy import PolicyConfig
from workers.settings import WorkerSettings

log = logging.getLogger("precast.workers")


def build(settings: WorkerSettings, worker_cls: type[Worker] = Worker) -> Worker:
    """The worker a settings object describes (also used by tests, benchmarks, and the shadow
    run, which passes its own `Worker` subclass)."""
    m, w, pol = settings.model, settings.worker, settings.policy
    fleet = load_fleet(settings.fleet.spec)
    serving = fleet.spec.serving
    load_model = partial(
        _load_model,
        fleet=fleet,
        provider=m.provider,
        device_id=m.device_id,
        intra_op_threads=m.intra_op_threads,
        allow_spinning=m.allow_spinning,
        warmup_rows=m.warmup_rows,
    )
    registry = ModelRegistry(load_model, path=m.path, registry=m.registry, poll_s=m.registry_poll_s)
    topics = catalog(
        settings.topics.prefix, settings.topics.partitions, settings.topics.replication_factor
    )
    instance = w.instance_id or f"{socket.gethostname()}-{os.getpid()}"
    pipe = PipelineConfig(
        policy=PolicyConfig(
            min_change=pol.min_change,
            refresh_lead_ms=pol.refresh_lead_ms,
            throttle_ms=pol.throttle_ms,
            safety=pol.safety,
            hot_safety=pol.hot_safety,
            max_change=pol.max_change,
            every_event=pol.every_event,
        ),
        max_batch=w.batch_max,
        max_queue_delay_s=w.max_queue_delay_ms / 1000.0,
        preferred_batch_sizes=w.preferred_batch_sizes,
        horizon_ms=int((w.horizon_s or serving.horizon_s) * 1000),
        top_k=m.top_k or serving.top_k,
        max_ahead_ms=round(fleet.spec.time.max_ahead_s * 1000),
        request_wait_s=w.request_wait_s,
        request_wait_max=w.request_wait_max,
        lease=LeaseConfig(
            enabled=w.renewal == "lease",
            interval_ms=w.lease_interval_ms,
            max_extension_ms=round(w.lease_max_extension_s * 1000),
        ),
    )
    if pipe.lease.enabled and slack_ms(pipe) <= 0:
        log.warning(
            "validity leases need horizon (%d ms) > lease interval + refresh lead: answers are "
            "renewed whole",
            pipe.horizon_ms,
        )
    loop = LoopConfig(
        group_id=w.group_id,
        consume_max=w.consume_max,
        poll_timeout_s=w.poll_timeout_s,
        commit_interval_s=w.commit_interval_ms / 1000.0,
        exactly_once=w.exactly_once,
        transactional_id=f"{settings.topics.prefix}{w.group_id}.{instance}",
        transaction_timeout_ms=w.transaction_timeout_ms,
        linger_ms=w.linger_ms,
    )
    return worker_cls(settings.kafka, topics, registry, pipe, loop, fleet=fleet)


def _load_model(path: Path, **kw: Any) -> ModelSession:
    return ModelSession(path, **kw)


def run(settings: WorkerSettings) -> int:
    connect_as(settings, "worker")  # one line for a refused password or ACL
    worker = build(settings)

    def health() -> tuple[bool, dict]:
        stalled = time.monotonic() - worker.last_loop
        return stalled < 30, {"seconds_since_loop": round(stalled, 3)}

    def ready() -> tuple[bool, dict]:
        return worker.ready, {
            "assigned_partitions": len(worker.assigned),
            "restoring_context_partitions": len(worker.restoring),
            "model_version": worker.registry.current.version,
        }

    probe = start_probe(settings.metrics.host, settings.metrics.port, health=health, ready=ready)

    def _stop(*_: object) -> None:
        worker.running = False

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGHUP, lambda *_: worker.registry.request_check())
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>`: every thread's stack to stderr
    model = worker.registry.current
    where = model.providers[0] if isinstance(model, ModelSession) else type(model).__name__
    mode = "exactly-once" if settings.worker.exactly_once else "at-least-once"
    print(
        f"precast-worker: model {model.version} on {where}, group {settings.worker.group_id}, "
        f"{mode}",
        file=sys.stderr,
        flush=True,
    )
    tune_gc()
    register_heap_metrics()
    try:
        worker.run()  # returns after everything consumed is predicted, flushed and committed
    finally:
        worker.close()
        if probe:
            probe.stop()
    print(f"precast-worker: stopped after {worker.batches} batches", file=sys.stderr, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="precast-worker", description=__doc__.splitlines()[0])
    p.add_argument("--model", dest="path", help="model folder (model.onnx + manifest.json)")
    p.add_argument("--registry", help="folder of model versions to serve and hot-swap from")
    p.add_argument("--provider", help="auto | cpu | cuda | tensorrt")
    p.add_argument(
        "--exactly-once", action="store_true", default=None, help="use Kafka transactions"
    )
    args = p.parse_args(argv)

    def body() -> int:
        model = {
            k: v
            for k, v in (
                ("path", args.path),
                ("registry", args.registry),
                ("provider", args.provider),
            )
            if v is not None
        }
        worker = {"exactly_once": True} if args.exactly_once else {}
        settings = load(
            WorkerSettings,
            **({"model": model} if model else {}),
            **({"worker": worker} if worker else {}),
        )
        setup_logging(settings.log_level)
        return run(settings)

    return run_cli("precast-worker", body)


if __name__ == "__main__":
    sys.exit(main())
