"""`precast-simulator`: publish a simulated device fleet's events to Kafka."""

from __future__ import annotations

import argparse
import signal
import sys
import time

from prometheus_client import Counter

from precast.kafka import Admin, Producer
from precast.observability import ProbeServer
from precast.runtime import run_cli, setup_logging
from precast.settings import load
from producers.publisher import EventPublisher
from producers.settings import SimulatorSettings
from producers.simulator import Fleet, paced
from schemas.topics import catalog

EVENTS = Counter("precast_simulator_events_total", "events published by the simulator", ["kind"])


def run(settings: SimulatorSettings) -> int:
    opts = settings.simulator
    Admin(settings.kafka).wait_reachable()
    topics = catalog(settings.topics.prefix, settings.topics.partitions, settings.topics.replication_factor)
    producer = Producer(settings.kafka)
    publisher = EventPublisher(producer, topics)
    fleet = Fleet(opts.devices, opts.seed)
    probe = ProbeServer(settings.metrics.host, settings.metrics.port).start() if settings.metrics.port else None

    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    started = last = time.monotonic()
    sent = last_sent = 0
    for due, now_ms in paced(opts.rate):
        if opts.count:
            due = min(due, opts.count - sent)
        for event in fleet.heartbeats(due, now_ms):
            publisher.publish(event)
        EVENTS.labels("heartbeat").inc(due)
        sent += due
        now = time.monotonic()
        if now - last >= opts.progress_every_s:
            print(f"simulator: {sent:,} events, {(sent - last_sent) / (now - last):,.0f}/s now, "
                  f"{producer.pending():,} in flight", file=sys.stderr, flush=True)
            last, last_sent = now, sent
        if stop or (opts.count and sent >= opts.count) or (opts.duration_s and now - started >= opts.duration_s):
            break
    publisher.flush()
    elapsed = time.monotonic() - started
    print(f"simulator: done, {sent:,} events in {elapsed:.1f}s ({sent / max(elapsed, 1e-9):,.0f}/s), "
          f"{producer.failed_total} delivery failures", file=sys.stderr, flush=True)
    if probe:
        probe.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="precast-simulator", description=__doc__)
    p.add_argument("--devices", type=int)
    p.add_argument("--rate", type=float, help="events per second, whole fleet")
    p.add_argument("--seed", type=int)
    p.add_argument("--duration", type=float, dest="duration_s", help="seconds to run (0 = unlimited)")
    p.add_argument("--count", type=int, help="events to send (0 = unlimited)")
    args = p.parse_args(argv)

    def body() -> int:
        overrides = {k: v for k, v in vars(args).items() if v is not None}
        settings = load(SimulatorSettings, simulator=overrides)  # flags win over env, validated
        setup_logging(settings.log_level)
        return run(settings)

    return run_cli("precast-simulator", body)


if __name__ == "__main__":
    sys.exit(main())
