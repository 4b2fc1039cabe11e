"""`precast-drift` (`python -m workers.drift.cli`): is the live fleet still the one the model was
trained on? A side consumer of the heartbeats topic, in its own consumer group, off the hot
path: the worker never waits for it. Every `step_s` it tests the last `window_s` of heartbeats
against the model version's frozen reference (docs/observability.md, "Drift").
"""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

from precast.fleet import load_fleet
from precast.kafka import Admin, Consumer
from precast.runtime import OneLineParser, run_cli, setup_logging
from precast.settings import load
from precast.telemetry.endpoints import start_probe
from workers.drift.monitor import DriftMonitor
from workers.drift.reference import load_reference
from workers.settings import DriftSettings


def build(settings: DriftSettings) -> DriftMonitor:
    d = settings.drift
    fleet = load_fleet(settings.fleet.spec)
    return DriftMonitor(
        load_reference(d.model_path, fleet.features),
        fleet=fleet,
        window_s=d.window_s,
        step_s=d.step_s,
        min_rows=d.min_rows,
        max_rows=d.max_rows,
        alpha=d.alpha,
        min_effect=d.min_effect,
    )


def run(settings: DriftSettings) -> int:
    d = settings.drift
    monitor = build(settings)  # a missing reference is a config error before any connection
    Admin(settings.kafka).wait_reachable()
    topics = settings.topics.catalog()
    # Drift is about now: start from the newest heartbeats, never replay history (the monitor
    # commits nothing, so every start begins at the end).
    newest: dict[str, Any] = {"auto.offset.reset": "latest"}
    consumer = Consumer(settings.kafka, d.group_id, **newest)
    consumer.subscribe([topics.heartbeats.name])
    last_loop = time.monotonic()
    # Kept by the loop: the probes run on another thread, and a client call from there waits
    # behind the loop's consume() (the worker does the same).
    state = {"assigned": 0}

    def health() -> tuple[bool, dict]:
        stalled = time.monotonic() - last_loop
        return stalled < 30, {"seconds_since_loop": round(stalled, 3)}

    def ready() -> tuple[bool, dict]:
        return state["assigned"] > 0, {
            "assigned_partitions": state["assigned"],
            "reference": monitor.ref.model_version,
            "window_rows": len(monitor.window),
        }

    probe = start_probe(settings.metrics.host, settings.metrics.port, health=health, ready=ready)
    running = True

    def _stop(*_: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    print(
        f"precast-drift: reference {monitor.ref.model_version} ({monitor.ref.rows:,} rows, "
        f"{len(monitor.ref.features)} features), window {d.window_s:g}s every {d.step_s:g}s",
        file=sys.stderr,
        flush=True,
    )
    windows = flagged = 0
    try:
        while running:
            msgs = consumer.consume(d.consume_max, d.poll_timeout_s)
            now = time.time()
            last_loop = time.monotonic()
            state["assigned"] = len(consumer.assignment())
            if msgs:
                monitor.add_records(msgs, now)
            if monitor.due(now):
                r = monitor.evaluate(now)
                windows += r is not None
                flagged += bool(r is not None and r.drifted)
    finally:
        consumer.close()
        if probe:
            probe.stop()
    print(
        f"precast-drift: stopped after {windows} windows, {flagged} with drift",
        file=sys.stderr,
        flush=True,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="precast-drift", description=__doc__.splitlines()[0])
    p.add_argument("--model", help="model folder holding drift-reference.npz")
    args = p.parse_args(argv)

    def body() -> int:
        overrides = {"drift": {"model_path": args.model}} if args.model else {}
        settings = load(DriftSettings, **overrides)
        setup_logging(settings.log_level)
        return run(settings)

    return run_cli("precast-drift", body)


if __name__ == "__main__":
    sys.exit(main())
