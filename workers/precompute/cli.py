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
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from precast.fleet import load_fleet
from precast.kafka import Consumer
from precast.kafka.access import connect_as
from precast.runtime import OneLineParser, run_cli, setup_logging
from precast.settings import load
from precast.telemetry.endpoints import start_probe
from precast.telemetry.heap import register_heap_metrics
from precast.telemetry.tracing import Tracing, start_tracing
from workers.model.inference import ModelSession
from workers.model.registry import ModelRegistry
from workers.precompute.assembly import LoopParts, assemble, prediction_output
from workers.precompute.config import loop_config, pipeline_config
from workers.precompute.loop import Worker, tune_gc, wall_ms
from workers.precompute.outputs import Clock, Output
from workers.precompute.publish.lease_book import slack_ms
from workers.settings import WorkerSettings

log = logging.getLogger("precast.workers")


def build(
    settings: WorkerSettings,
    *,
    clock: Clock = wall_ms,
    make_output: Callable[[LoopParts], Output] = prediction_output,
    wrap_consumer: Callable[[Consumer], Any] | None = None,
    reader: str = "worker",
    tracing: Tracing | None = None,
) -> Worker:
    """The worker a settings object describes (also used by tests, benchmarks, and the shadow
    run, which passes its own output, clock and consumer wrapper). `tracing`: the process's
    tracer (`run` starts it from `settings.tracing`); off when not given."""
    m, w = settings.model, settings.worker
    fleet = load_fleet(settings.fleet.spec)
    load_model = partial(
        _load_model,
        fleet=fleet,
        provider=m.provider,
        device_id=m.device_id,
        intra_op_threads=m.intra_op_threads,
        allow_spinning=m.allow_spinning,
        warmup_rows=m.warmup_rows,
        memory_budget_mb=w.model_memory_mb,
    )
    registry = ModelRegistry(load_model, path=m.path, registry=m.registry, poll_s=m.registry_poll_s)
    topics = settings.topics.catalog()
    instance = w.instance_id or f"{socket.gethostname()}-{os.getpid()}"
    pipe = pipeline_config(settings, fleet)
    if pipe.lease.enabled and slack_ms(pipe) <= 0:
        log.warning(
            "validity leases need horizon (%d ms) > lease interval + refresh lead: answers are "
            "renewed whole",
            pipe.horizon_ms,
        )
    loop = loop_config(settings, instance)
    return assemble(
        settings.kafka,
        topics,
        registry,
        pipe,
        loop,
        fleet=fleet,
        clock=clock,
        make_output=make_output,
        wrap_consumer=wrap_consumer,
        reader=reader,
        tracing=tracing,
    )


def _load_model(path: Path, **kw: Any) -> ModelSession:
    return ModelSession(path, **kw)


def run(settings: WorkerSettings) -> int:
    connect_as(settings, "worker")  # one line for a refused password or ACL
    tracing = start_tracing(settings.tracing, "precast-worker")
    worker = build(settings, tracing=tracing)

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
        tracing.shutdown()  # exports the spans still queued
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
