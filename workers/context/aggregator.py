"""`precast-context`: per-device context from the work-order and alarm streams, on faust.

A faust table keyed by device holds each device's `DeviceContext` snapshot (changelog-backed,
so a restarted or rebalanced instance restores it), updated by the same pure reducer the
worker uses (`precast.fleet.context`, compiled from the fleet spec); every change is published
to the compacted device-context
topic, which is what workers restore from. Both streams are low-rate, which is why faust
(aiokafka, asyncio) is acceptable here and kept off the worker's hot path. Records that break
the contract go to the dead-letter topic (faust flushes its producer before it commits).

Why no faust windowed table: the features count alarms in the *sliding* hour before the
prediction's event time, computed from the bounded per-device alarm list in the snapshot;
faust windows are tumbling/hopping and would keep a second copy of the same facts.

With tracing on, each event folded is a `fold` span whose parent is the event's `traceparent`
(the producer's publish span): the event's trace goes on through the aggregator.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from prometheus_client import Counter, Gauge

from precast.deadletter import DEAD_LETTERS, dead_letter_record
from precast.fleet import load_fleet, snapshot
from precast.guard import Guard, classify
from precast.kafka import Admin, Record
from precast.runtime import OneLineParser, run_cli, setup_logging
from precast.settings import load
from precast.telemetry.endpoints import start_probe
from precast.telemetry.tracing import TRACEPARENT, Tracing, checked, start_tracing
from schemas.deadletters import Reason
from schemas.topics import TopicSpec
from schemas.validation import Rejected, Validator
from workers.context.faust_config import connection_options, preflight
from workers.settings import ContextSettings

log = logging.getLogger("precast.context")
COMPONENT = "context"

EVENTS = Counter(
    "precast_context_events_total", "events folded into device context", ["topic", "result"]
)
SNAPSHOTS = Counter("precast_context_snapshots_total", "context snapshots published")
DEVICES = Gauge("precast_context_devices", "devices with context on this instance")


def build_app(
    settings: ContextSettings, tracing: Tracing | None = None
) -> tuple[Any, dict[str, Any]]:
    """The faust app and its state (for probes). Import faust lazily: the worker never needs it.
    `tracing`: the process's tracer (`run` starts it from `settings.tracing`); off when absent."""
    import faust
    from faust.tables.manager import TableManager

    tracing = tracing or Tracing.off()
    t = settings.topics
    topics = t.catalog()
    c = settings.context
    fleet = load_fleet(settings.fleet.spec)
    model = fleet.context
    # State is named after the context definitions (their hash): a spec that changes them
    # starts a new consumer group and table, which rebuild every device's context from the
    # topics, instead of folding new events into snapshots of the old meaning.
    # The deployment's group prefix first (KafkaSettings.group_prefix, schemas.access).
    app_id = f"{settings.kafka.group_prefix or ''}{c.app_id}-{model.hash[:8]}"
    # faust creates only the last folder of its datadir; a fresh checkout has no .precast/ yet.
    c.data_dir.parent.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        app_id,
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

    streams: dict[str, str] = {
        s.topic: name for name, s in fleet.spec.streams.items() if s.topic != "heartbeats"
    }
    sources: dict[str, str] = {getattr(topics, role).name: role for role in streams}
    out = raw_topic(topics.device_context.name)
    dlq = raw_topic(topics.dead_letters.name)
    # JSON text keys/values: the changelog is read back through the table's own serializers.
    table = app.Table(
        "device-context", default=None, partitions=t.partitions, key_type=str, value_type=str
    )
    state: dict[str, Any] = {"last_tick": time.monotonic(), "app": app}
    guard = Guard("context", log)

    async def fold(event: Any) -> None:
        record = to_record(event)
        got = decode(fleet.validator, sources, record)
        if isinstance(got, Rejected):
            await dead_letter(record, got.reason, got.detail)
            return
        role, e = got
        device = e["device_id"]
        current = table.get(device)
        ctx = snapshot.from_json(model, current.encode()) if current else model.new(device)
        changed = model.apply(ctx, streams[role], e)
        if not changed and current is not None:
            EVENTS.labels(record.topic(), "unchanged").inc()
            return
        snap = snapshot.to_json(model, ctx, int(time.time() * 1000))
        table[device] = snap.decode()
        # the fold span's context (None when tracing is off): the worker's batch links to it
        header = tracing.header()
        headers = [(TRACEPARENT, header)] if header is not None else None
        await out.send(key=device.encode(), value=snap, headers=headers)
        SNAPSHOTS.inc()
        EVENTS.labels(record.topic(), "applied").inc()

    async def dead_letter(record: Record, reason: Reason, detail: str) -> None:
        key, value, headers = dead_letter_record(record, reason, detail, COMPONENT)
        await dlq.send(key=key, value=value, headers=headers)
        DEAD_LETTERS.labels(COMPONENT, reason.value).inc()
        EVENTS.labels(record.topic(), "dead_letter").inc()

    async def guarded(event: Any) -> None:
        """The boundary (precast.guard): an event that makes the fold raise (nothing the
        validator passes should) is counted, logged and dead-lettered; a raising agent would
        stop consuming its stream."""
        try:
            await fold(event)
        except Exception as exc:  # noqa: BLE001 - anything a record can cause
            record = to_record(event)
            reason = guard.reject(exc, record, dead_letter=False)
            await dead_letter(record, reason, classify(exc)[1])

    traced = fold_span(tracing, guarded)

    async def consume(stream: Any) -> None:
        async for event in stream.events():
            await traced(event)

    for role in streams:  # one agent per context stream the fleet spec declares
        app.agent(raw_topic(getattr(topics, role).name), name=role.replace("_", "-"))(consume)

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


def fold_span(tracing: Tracing, fold: Callable[[Any], Awaitable[None]]) -> Any:
    """`fold`, inside a `fold` span continuing the event's trace when tracing is on."""
    if not tracing.enabled:
        return fold

    async def traced(event: Any) -> None:
        headers = event.message.headers or []
        value = next((v for k, v in headers if k == TRACEPARENT), None)
        if value is not None and not isinstance(value, bytes | str):
            value = bytes(value)
        attributes = {"messaging.source.name": str(event.message.topic)}
        parent = checked(value, "context")
        with tracing.span("fold", parent=parent, kind="consumer", attributes=attributes):
            await fold(event)

    return traced


def to_record(event: Any) -> Record:
    """A faust event as a `Record`, whatever its message holds (a header value of None or any
    buffer, no timestamp)."""
    msg = event.message
    headers = [
        (str(k), bytes(v) if isinstance(v, bytes | bytearray | memoryview) else b"")
        for k, v in (msg.headers or [])
    ]
    ts = msg.timestamp
    when = int(ts * 1000) if isinstance(ts, int | float) and math.isfinite(ts) else -1
    key, value = event.key, event.value
    return Record(
        str(msg.topic),
        int(msg.partition),
        int(msg.offset),
        key if isinstance(key, bytes) or key is None else bytes(key),
        value if isinstance(value, bytes) or value is None else bytes(value),
        headers,
        when,
    )


def decode(
    validator: Validator, sources: dict[str, str], record: Record
) -> tuple[str, dict[str, Any]] | Rejected:
    """(stream role, validated event) of one record of a context stream, or why not."""
    role = sources.get(record.topic())
    if role is None:
        return Rejected(Reason.UNKNOWN, f"the context aggregator does not read {record.topic()!r}")
    got = validator.validate(role, record.key(), record.value(), record.headers())
    if isinstance(got, Rejected):
        return got
    event: dict[str, Any] = got.event
    return role, event


def prepare_topics(settings: ContextSettings, app: Any) -> None:
    """Create the table's changelog topic with the contract's partition count and replication
    before faust starts, and wait for it in the metadata. Left to faust, it is created while the
    agents start, and a first event can be folded while the consumer's metadata still lists the
    new topic incompletely: faust then raises PartitionsMismatch (source and changelog partition
    counts differ) and the app stops, seen on a freshly started stack."""
    t = settings.topics
    name = f"{app.conf.id}-device-context-changelog"
    spec = TopicSpec(
        "context_changelog",
        name,
        t.partitions,
        t.replication_factor,
        "compact",
        True,
        "faust's changelog of the device-context table",
        {"cleanup.policy": "compact"},
    )
    Admin(settings.kafka).ensure_topics([spec])


def run(settings: ContextSettings) -> int:
    import faust

    preflight(settings)
    tracing = start_tracing(settings.tracing, "precast-context")
    app, state = build_app(settings, tracing)
    prepare_topics(settings, app)

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

    probe = start_probe(settings.metrics.host, settings.metrics.port, health=health, ready=ready)
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
        tracing.shutdown()  # exports the spans still queued
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
