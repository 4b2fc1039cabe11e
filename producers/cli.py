"""`precast-simulator`: publish a simulated device fleet's events to Kafka.

Heartbeats round-robin over N devices, alarms and work orders at rates that follow each
device's hidden condition, some devices drifting, optional malformed records (--bad-rate), all
under a global rate limit; a progress line with the achieved rate, a summary at the end.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections import Counter as Tally
from pathlib import Path

from prometheus_client import Counter

from precast.fleet import load_fleet
from precast.kafka import Producer
from precast.kafka.access import connect_as
from precast.runtime import OneLineParser, run_cli, setup_logging
from precast.settings import load
from precast.telemetry.endpoints import ProbeServer
from precast.telemetry.tracing import start_tracing
from producers.badrecords import BadRecord
from producers.pacing import RateLimiter
from producers.publisher import ROLE_BY_EVENT_KIND, EventPublisher
from producers.settings import SimulatorOptions, SimulatorSettings
from producers.simulator import DriftProfile, Fleet, Resolutions

# the event kinds the simulator has always counted (its metric's labels), by topic role
_EVENT_KIND_BY_ROLE = {role: kind for kind, role in ROLE_BY_EVENT_KIND.items()}
EVENTS = Counter(
    "precast_simulator_events_total",
    "records published by the simulator (bad = injected malformed)",
    ["kind"],
)


def make_fleet(opts: SimulatorOptions, spec: Path | None = None) -> Fleet:
    return Fleet(
        opts.devices,
        opts.seed,
        fleet=load_fleet(spec),
        hb_interval_s=opts.hb_interval_s,
        speedup=opts.speedup,
        drift_share=opts.drift_share,
        profile=opts.profile,
        drift_s=opts.drift_s,
        drift_at_s=opts.drift_at_s,
        bad_rate=opts.bad_rate,
        run_id=opts.run_id,
        drift=(
            DriftProfile(opts.drift_profile_at_s, opts.drift_profile_ramp_s, opts.drift_profile_mix)
            if opts.drift_profile == "shift"
            else None
        ),
        resolutions=(
            Resolutions(
                opts.resolution_wrong_share, opts.resolution_missing_share, opts.resolution_delay_s
            )
            if opts.resolutions
            else None
        ),
    )


def _describe(sent: Tally[str]) -> str:
    bad = sum(v for k, v in sent.items() if k.startswith("bad:"))
    return (
        f"{sent['heartbeat']:,} heartbeats, {sent['work_order']:,} work orders, "
        f"{sent['alarm']:,} alarms, {bad:,} bad"
    )


def run(settings: SimulatorSettings) -> int:
    opts = settings.simulator
    connect_as(settings, "simulator")  # one line for a refused password or ACL
    topics = settings.topics.catalog()
    producer = Producer(settings.kafka)
    tracing = start_tracing(settings.tracing, "precast-simulator")
    publisher = EventPublisher(producer, topics, tracing=tracing)
    fleet = make_fleet(opts, settings.fleet.spec)
    probe = (
        ProbeServer(settings.metrics.host, settings.metrics.port).start()
        if settings.metrics.port
        else None
    )

    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    # Heartbeat demand is devices / interval; the global limit caps everything sent.
    demand = opts.devices / fleet.sim.hb_interval_s
    limit = min(opts.rate, demand) if opts.rate else demand
    pacer = RateLimiter(limit)
    chunk = max(1, min(2000, int(limit / 20)))  # ~50 ms of records per step
    sent = Tally[str]()
    total = last_total = 0
    started = last = time.monotonic()
    print(
        f"simulator: {opts.devices:,} devices, run {fleet.run_id}, limit {limit:,.0f} records/s"
        f"{f', bad rate {opts.bad_rate:g}' if opts.bad_rate else ''}",
        file=sys.stderr,
        flush=True,
    )
    try:
        while not stop:
            records = fleet.step(chunk, int(time.time() * 1000))
            if opts.count:
                records = records[: opts.count - total]
            pacer.wait(len(records))
            chunk_kinds = Tally[str]()
            for r in records:
                if isinstance(r, BadRecord):
                    publisher.publish_raw(r.role, r.key, r.value, r.headers)
                    chunk_kinds[f"bad:{r.kind}"] += 1
                else:
                    publisher.publish(r)
                    chunk_kinds[_EVENT_KIND_BY_ROLE.get(r.role, r.role)] += 1
            for k, v in chunk_kinds.items():
                EVENTS.labels(k.split(":")[0]).inc(v)
            sent.update(chunk_kinds)
            total += len(records)
            now = time.monotonic()
            if now - last >= opts.progress_every_s:
                print(
                    f"simulator: {total:,} records ({_describe(sent)}), "
                    f"{(total - last_total) / (now - last):,.0f}/s now, "
                    f"{total / (now - started):,.0f}/s average, {producer.pending():,} queued",
                    file=sys.stderr,
                    flush=True,
                )
                last, last_total = now, total
            if (opts.count and total >= opts.count) or (
                opts.duration_s and now - started >= opts.duration_s
            ):
                break
    finally:
        try:
            publisher.close(timeout=60.0)  # flush on shutdown; raises if any was not delivered
        finally:
            tracing.shutdown()  # exports the spans still queued
        if probe:
            probe.stop()
    elapsed = time.monotonic() - started
    print(
        f"simulator: done, {total:,} records in {elapsed:.1f}s ({total / max(elapsed, 1e-9):,.0f}/s): "
        f"{_describe(sent)}; {producer.failed_total} delivery failures",
        file=sys.stderr,
        flush=True,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(
        prog="precast-simulator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--devices", type=int, help="devices in the fleet (default 10000)")
    p.add_argument(
        "--rate", type=float, help="global limit, records/s over all topics (0 = unlimited)"
    )
    p.add_argument(
        "--hb-interval",
        type=float,
        dest="hb_interval_s",
        help="seconds between a device's heartbeats",
    )
    p.add_argument(
        "--speedup", type=float, help="simulated-time multiplier for alarms, work orders, drift"
    )
    p.add_argument("--drift-share", type=float, help="share of devices that drift into a fault")
    p.add_argument(
        "--drift-at", type=float, dest="drift_at_s", help="simulated second all drift starts at"
    )
    p.add_argument(
        "--drift-profile",
        choices=("none", "shift"),
        help="shift: the conditions' mix and signatures change from --drift-profile-at on",
    )
    p.add_argument(
        "--drift-profile-at",
        type=float,
        dest="drift_profile_at_s",
        help="simulated second the drift profile's shift starts at",
    )
    p.add_argument(
        "--resolution-delay",
        type=float,
        dest="resolution_delay_s",
        help="mean simulated seconds until a work order is resolved (default: the spec's)",
    )
    p.add_argument(
        "--bad-rate", type=float, help="share of records replaced by malformed ones (every kind)"
    )
    p.add_argument(
        "--profile",
        choices=("iid", "noisy", "steady"),
        help="heartbeat noise over time (default noisy; docs/events.md)",
    )
    p.add_argument("--seed", type=int)
    p.add_argument("--run-id", help="event-id prefix (random unless set)")
    p.add_argument(
        "--duration", type=float, dest="duration_s", help="seconds to run (0 = unlimited)"
    )
    p.add_argument("--count", type=int, help="records to send (0 = unlimited)")
    args = p.parse_args(argv)

    def body() -> int:
        overrides = {k: v for k, v in vars(args).items() if v is not None}
        env = load(SimulatorSettings)
        settings = load(SimulatorSettings, simulator={**env.simulator.model_dump(), **overrides})
        setup_logging(settings.log_level)
        return run(settings)

    return run_cli("precast-simulator", body)


if __name__ == "__main__":
    sys.exit(main())
