"""`precast-context`: per-device context from the work-order and alarm streams, on faust.

A faust table keyed by device holds each device's `DeviceContext` snapshot (changelog-backed,
so a restarted or rebalanced instance restores it), updated by the same pure reducer the
worker uses (`workers.context.reducer`); every change is published to the compacted device-context
topic, which is what workers restore from. Both streams are low-rate, which is why faust
(aiokafka, asyncio) is acceptable here and kept off the worker's hot path. Records that break
the contract go to the dead-letter topic (faust flushes its producer before it commits).

Why no faust windowed table: the features count alarms in the *sliding* hour before the
prediction's event time, computed from the bounded per-device alarm list in the snapshot;
faust windows are tumbling/hopping and would keep a second copy of the same facts.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any, cast

from prometheus_client import Counter, Gauge

from precast.deadletter import DEAD_LETTERS, dead_letter_record
from precast.kafka import Record
from precast.observability import ProbeServer
from precast.runtime import OneLineParser, run_cli, setup_logging
from precast.settings import load
from schemas.topics import catalog
from schemas.validation import Rejected
from workers.context.faust_config import connection_options, preflight
from workers.context.reducer import DeviceContext
from workers.precompute.decode import validate
from workers.settings import ContextSettings

log = logging.getLogger("precast.context")
COMPONENT = "context"

EVENTS = Counter(
    "precast_context_events_total", "events folded into device context", ["topic", "result"]
)
SNAPSHOTS = Counter("precast_context_snapshots_total", "context snapshots published")
DEVICES = Gauge("precast_context_devices", "devices with context on this instance")


def build_app(settings: ContextSettings) -> tuple[Any, dict[str, Any]]:
    """The faust app and its state (for probes). Import faust lazily: the worker never needs it."""
    import faust
    from faust.tables.manager import TableManager

    t = settings.topics
    topics = catalog(t.prefix, t.partitions, t.replication_factor)
    c = settings.context
    # faust creates only the last folder of its datadir; a fresh checkout has no .precast/ yet.
    c.data_dir.parent.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        c.app_id,
        **connection_options(settings.kafka),  # TLS, SASL, client id, EXTRA (faust_config)
        store="memory://",
        topic_partitions=t.partitions,
        topic_replication_factor=t.replication_factor,
        # lz4 like every precast producer; aiokafka reads and writes it through cramjam.
        producer_compression_type="lz4",
        producer_acks=-1,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=c.commit_interval_s,
        datadir=str(c.data_dir),
        web_enabled=False,
        processing_guarantee="at_least_once",
        # faust's default session timeout (60 s) is how long a kill -9'd instance holds its
        # partitions before anyone, its own restart included, can take them over.
        broker_session_timeout=c.session_timeout_s,
        broker_heartbeat_interval=c.session_timeout_s / 4,
    )

    def raw_topic(name: str) -> Any:
        return app.topic(name, internal=False, key_serializer="raw", value_serializer="raw")

    sources = {topics.work_orders.name: "work_orders", topics.alarms.name: "alarms"}
    wo_topic = raw_topic(topics.work_orders.name)
    alarm_topic = raw_topic(topics.alarms.name)
    out = raw_topic(topics.device_context.name)
    dlq = raw_topic(topics.dead_letters.name)
    # JSON text keys/values: the changelog is read back through the table's own serializers.
    table = app.Table(
        "device-context", default=None, partitions=t.partitions, key_type=str, value_type=str
    )
    state: dict[str, Any] = {"last_tick": time.monotonic(), "app": app}

    async def fold(event: Any) -> None:
        msg = event.message
        record = Record(
            msg.topic,
            msg.partition,
            msg.offset,
            event.key,
            event.value,
            [(k, bytes(v)) for k, v in (msg.headers or [])],
            int(msg.timestamp * 1000),
        )
        role = sources[msg.topic]
        e = validate(role, record)
        if isinstance(e, Rejected):
            key, value, headers = dead_letter_record(record, e.reason, e.detail, COMPONENT)
            await dlq.send(key=key, value=value, headers=headers)
            DEAD_LETTERS.labels(COMPONENT, e.reason.value).inc()
            EVENTS.labels(msg.topic, "dead_letter").inc()
            return
        device = e["device_id"]
        current = table.get(device)
        ctx = DeviceContext.from_json(current.encode()) if current else DeviceContext(device)
        changed = ctx.apply_work_order(e) if role == "work_orders" else ctx.apply_alarm(e)
        if not changed and current is not None:
            EVENTS.labels(msg.topic, "unchanged").inc()
            return
        snapshot = ctx.to_json(int(time.time() * 1000))
        table[device] = snapshot.decode()
        await out.send(key=device.encode(), value=snapshot)
        SNAPSHOTS.inc()
        EVENTS.labels(msg.topic, "applied").inc()

    @app.agent(wo_topic, name="work-orders")
    async def work_orders(stream: Any) -> None:
        async for event in stream.events():
            await fold(event)

    @app.agent(alarm_topic, name="alarms")
    async def alarms(stream: Any) -> None:
        async for event in stream.events():
            await fold(event)

    @app.timer(1.0)
    async def tick() -> None:
        # Probes run on another thread and must not touch faust's lazily built objects (doing
        # so from there during start-up builds them outside the event loop and stalls the app):
        # the loop itself publishes what they report.
        state["last_tick"] = time.monotonic()
        state["assigned"] = len(app.consumer.assignment())
        # `recovery` belongs to faust's TableManager, not to its TableManagerT interface.
        recovery = cast(TableManager, app.tables).recovery
        state["recovering"] = not recovery.completed.is_set()
        DEVICES.set(len(table))

    return app, state


def run(settings: ContextSettings) -> int:
    import faust

    preflight(settings)
    app, state = build_app(settings)

    def health() -> tuple[bool, dict]:
        stalled = time.monotonic() - state["last_tick"]
        return stalled < 30, {"seconds_since_tick": round(stalled, 3)}

    def ready() -> tuple[bool, dict]:
        assigned, recovering = state.get("assigned", 0), state.get("recovering", True)
        fresh = time.monotonic() - state["last_tick"] < 5
        return fresh and assigned > 0 and not recovering, {
            "assigned_partitions": assigned,
            "recovering": recovering,
        }

    probe = (
        ProbeServer(
            settings.metrics.host, settings.metrics.port, health=health, ready=ready
        ).start()
        if settings.metrics.port
        else None
    )
    print(
        f"precast-context: app {settings.context.app_id} on {settings.kafka.bootstrap_servers}",
        file=sys.stderr,
        flush=True,
    )
    try:
        # faust.Worker installs SIGTERM/SIGINT handlers that stop the app cleanly (commit, leave).
        worker = faust.Worker(
            app,
            loglevel=settings.log_level,
            quiet=True,
            redirect_stdouts=False,
            override_logging=False,
            loop=asyncio.new_event_loop(),
        )
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        if probe:
            probe.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="precast-context", description=__doc__.splitlines()[0])
    p.parse_args(argv)

    def body() -> int:
        settings = load(ContextSettings)
        setup_logging(settings.log_level)
        return run(settings)

    return run_cli("precast-context", body)


if __name__ == "__main__":
    sys.exit(main())
