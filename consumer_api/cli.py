"""`precast-api`: serve the newest precomputed prediction per device over HTTP."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from consumer_api.app import create_app
from consumer_api.board.board_layout import BoardLayout
from consumer_api.board.feed import BoardFeed
from consumer_api.board.fleet_index import FleetIndex
from consumer_api.board.lineage import LineageReader
from consumer_api.board.routes import Board
from consumer_api.materialize.materializer import Materializer
from consumer_api.read.hub import Hub
from consumer_api.read.service import Service
from consumer_api.serve import ServerLimits, check_bind, serve
from consumer_api.settings import ApiSettings
from consumer_api.speculation.precompute_budget import Budget, LocalBudget, RedisBudget
from consumer_api.speculation.precompute_requests import PrecomputeAsker
from consumer_api.speculation.read_hints import ReadHints
from precast.errors import ConfigError
from precast.fleet import load_fleet
from precast.kafka import Producer
from precast.kafka.access import connect_as
from precast.presence import Presence
from precast.redis_client import connect_async
from precast.runtime import (
    OneLineParser,
    limit_malloc_arenas,
    run_cli,
    setup_logging,
    trim_malloc_every,
)
from precast.serving import AsyncRedisReader, MemoryStore, RedisStore
from precast.settings import load
from precast.telemetry.heap import register_heap_metrics
from schemas.topics import catalog


@dataclass
class Built:
    service: Service
    materializer: Materializer
    app: object
    board_feed: BoardFeed | None = None
    board: Board | None = None


def build(settings: ApiSettings) -> Built:
    """Stores, materializer, precompute-request producer and the ASGI app, wired from one settings object."""
    opts = settings.api
    if not opts.local_view and not settings.redis.url:
        raise ConfigError("PRECAST_API__LOCAL_VIEW=false needs Redis (PRECAST_REDIS__URL is empty)")
    topics = catalog(
        settings.topics.prefix, settings.topics.partitions, settings.topics.replication_factor
    )
    fleet = load_fleet(settings.fleet.spec)
    default_strategy = opts.default_strategy or fleet.spec.serving.default_label
    if default_strategy not in fleet.spec.labels:
        raise ConfigError(
            f"PRECAST_API__DEFAULT_STRATEGY={default_strategy!r} is not a label of fleet spec "
            f"{fleet.name!r} ({', '.join(fleet.spec.labels)})"
        )
    opts = opts.model_copy(update={"default_strategy": default_strategy})
    # each room its own section of the options (consumer_api.settings)
    mat_opts, board_opts = opts.materialize_options(), opts.board_options()
    spec_opts = opts.speculation_options()
    grace_ms = mat_opts.grace_ms
    view = MemoryStore(grace_ms) if mat_opts.local_view else None
    shared = RedisStore.from_settings(settings.redis, grace_ms) if settings.redis.url else None
    hub = Hub(opts.sse_max_streams)
    index = (
        FleetIndex(
            default_strategy=default_strategy,
            serve_stale=opts.expired == "stale",
            grace_ms=grace_ms,
            layout=BoardLayout(fleet),
            history_depth=board_opts.history_depth,
            history_devices=board_opts.history_devices,
            leases=view.leases if view is not None else None,
        )
        if board_opts.enabled
        else None
    )

    def on_stored(items: list) -> None:
        hub.publish_threadsafe(items)
        if index is not None:
            index.stored(items)

    def on_leased(leases: list) -> None:
        if view is not None:
            hub.publish_leased_threadsafe({x.partition for x in leases}, view.peek)
        if index is not None:
            index.leased(leases)

    mat = Materializer(
        settings.kafka,
        topics.predictions.name,
        topics.predictions.partitions,
        view=view,
        shared=shared,
        group_prefix=mat_opts.group_id,
        producer=Producer(settings.kafka),
        dead_letter_topic=topics.dead_letters.name,
        on_stored=on_stored,
        on_leased=on_leased,
        batch=mat_opts.batch,
        wait_s=mat_opts.wait_s,
        ready_max_lag=mat_opts.ready_max_lag,
    )

    def readiness() -> tuple[bool, dict]:
        return mat.ready, {
            "lag": mat.lag,
            "devices": len(view) if view is not None else None,
            "redis": None if shared is None else ("up" if mat.redis_up else "down"),
        }

    def health() -> tuple[bool, dict]:
        # What is down, never why: the reason is logged (it may quote a broker or a record).
        return mat.error is None, {} if mat.error is None else {"down": ["materializer"]}

    budget: Budget = (
        RedisBudget(
            connect_async(settings.redis),
            settings.redis.key_prefix,
            spec_opts.budget_per_s,
            spec_opts.burst,
        )
        if settings.redis.url
        else LocalBudget(spec_opts.budget_per_s, spec_opts.burst)
    )
    producer = Producer(settings.kafka)  # precompute requests and read hints share one client
    asker = PrecomputeAsker(
        producer,
        topics.precompute_requests.name,
        spec_opts.request_window_ms,
        budget=budget,
    )
    hints = ReadHints(producer, topics.read_hints.name, spec_opts.hot_for_ms)
    svc = Service(
        opts,
        view,
        None if opts.local_view else AsyncRedisReader(settings.redis),
        asker,
        readiness=readiness,
        health=health,
        hub=hub,
        hints=hints,
    )
    feed = (
        BoardFeed(settings.kafka, topics, index, group_prefix=board_opts.group_id)
        if index is not None
        else None
    )
    if feed is not None:  # /readyz turns false once the board feed gives up
        svc.parts.append(feed.supervised)
    event_roles = {t.name: t.role for t in topics.events()}  # lineage names only these
    board = (
        Board(
            index,
            feed,
            LineageReader(settings.kafka, set(event_roles), board_opts.group_id),
            max_rows=board_opts.max_rows,
            queue_max=board_opts.queue_max,
            frame_s=board_opts.frame_s,
            event_roles=event_roles,
        )
        if index is not None
        else None
    )
    return Built(svc, mat, create_app(svc, board), feed, board)


def run(settings: ApiSettings) -> int:
    check_bind(settings.api.host, settings.api.port)  # before the rebuild, not after it
    connect_as(settings, "api")  # one line for a refused password or ACL
    built = build(settings)
    # The materializer thread holds the GIL in short bursts; a shorter switch interval than
    # the default 5 ms keeps it from adding milliseconds to a read's latency.
    sys.setswitchinterval(0.001)
    built.materializer.start()
    if built.board_feed is not None:
        built.board_feed.start()
    # The materializer, board feed and lineage reads assign partitions: no consumer group
    # shows them, so they say themselves what they read (the operator tools' guard).
    topics = catalog(settings.topics.prefix)
    reads = [topics.predictions.name]
    if settings.api.board:
        reads += [topics.device_context.name, *(t.name for t in topics.events())]
    presence = Presence(settings.kafka, topics.presence.name, "api", reads)
    built.service.parts.append(presence.supervised)  # /readyz names it if it gives up
    presence.start()
    if settings.api.auth_token is None and settings.api.tokens_file is None:
        # Allowed on loopback only (ApiOptions refuses it elsewhere); never silently.
        print(
            f"precast-api: no token configured: /v1/* answers anyone who can reach "
            f"{settings.api.host}:{settings.api.port} (docs/security.md)",
            file=sys.stderr,
            flush=True,
        )
    print(
        f"precast-api: serving on http://{settings.api.host}:{settings.api.port}"
        + (
            f" (board: http://{settings.api.host}:{settings.api.port}/board/)"
            if settings.api.board
            else ""
        ),
        file=sys.stderr,
        flush=True,
    )
    try:
        serve(
            built.app,
            settings.api.host,
            settings.api.port,
            settings.api.server,
            ServerLimits.from_options(settings.api),
        )
    finally:
        presence.stop()
        if built.board_feed is not None:
            built.board_feed.stop()
        if built.board is not None and built.board.lineage is not None:
            built.board.lineage.close()
        built.materializer.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="precast-api", description=__doc__)
    p.add_argument("--port", type=int)
    p.add_argument("--host")
    args = p.parse_args(argv)

    def body() -> int:
        overrides = {k: v for k, v in vars(args).items() if v is not None}
        settings = load(ApiSettings, api=overrides)
        setup_logging(settings.log_level)
        trim_malloc_every()
        register_heap_metrics()
        return run(settings)

    limit_malloc_arenas()  # before any thread: RSS that follows the data (docs/workers.md)
    return run_cli("precast-api", body)


if __name__ == "__main__":
    sys.exit(main())
