"""`precast-worker`: consume device events, precompute top-K strategies, publish predictions."""

from __future__ import annotations

import argparse
import signal
import sys
import time

from precast.kafka import Admin, Consumer, Producer
from precast.observability import ProbeServer
from precast.runtime import run_cli, setup_logging
from precast.settings import load
from schemas.topics import catalog
from workers.inference import ModelSession
from workers.loop import Worker
from workers.settings import WorkerSettings


def run(settings: WorkerSettings) -> int:
    Admin(settings.kafka).wait_reachable()
    m = settings.model
    model = ModelSession(m.path, provider=m.provider, device_id=m.device_id,
                         intra_op_threads=m.intra_op_threads, allow_spinning=m.allow_spinning)
    topics = catalog(settings.topics.prefix, settings.topics.partitions, settings.topics.replication_factor)
    consumer = Consumer(settings.kafka, settings.worker.group_id)
    producer = Producer(settings.kafka)
    w = settings.worker
    worker = Worker(consumer, producer, model, topics, batch_max=w.batch_max,
                    poll_timeout_s=w.poll_timeout_s, horizon_s=w.horizon_s, top_k=m.top_k)

    def health() -> tuple[bool, dict]:
        stalled = time.monotonic() - worker.last_loop
        return stalled < 30, {"seconds_since_loop": round(stalled, 3)}

    def ready() -> tuple[bool, dict]:
        parts = consumer.assignment()
        return bool(parts), {"assigned_partitions": len(parts), "model_version": model.version}

    probe = ProbeServer(settings.metrics.host, settings.metrics.port, health=health, ready=ready).start() \
        if settings.metrics.port else None

    def _stop(*_: object) -> None:
        worker.running = False

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(f"precast-worker: model {model.version} on {model.providers[0]}, group {w.group_id}",
          file=sys.stderr, flush=True)
    try:
        worker.run()  # returns after the in-flight batch is flushed and committed
    finally:
        consumer.close()
        if probe:
            probe.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="precast-worker", description=__doc__)
    p.add_argument("--model", dest="path", help="model folder (model.onnx + manifest.json)")
    p.add_argument("--provider", help="auto | cpu | cuda | tensorrt")
    args = p.parse_args(argv)

    def body() -> int:
        overrides = {k: v for k, v in vars(args).items() if v is not None}
        settings = load(WorkerSettings, model=overrides)
        setup_logging(settings.log_level)
        return run(settings)

    return run_cli("precast-worker", body)


if __name__ == "__main__":
    sys.exit(main())
