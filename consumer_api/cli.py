"""`precast-api`: serve the newest precomputed prediction per device over HTTP."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from consumer_api.app import create_app
from consumer_api.board import Board, FleetIndex, build_board, build_fleet_index
from consumer_api.board.feed import BoardFeed
from consumer_api.materialize import (
    build_edge_purger,
    build_materializer,
    build_stores,
    probes,
)
from consumer_api.materialize.materializer import Materializer, OnLeased, OnStored
from consumer_api.read import build_service
from consumer_api.read.hub import Hub
from consumer_api.read.service import Service
from consumer_api.serve import ServerLimits, check_bind, serve
from consumer_api.settings import ApiOptions, ApiSettings
from consumer_api.speculation import build_speculation
from precast.edge_cache.purge import NewestPurger
from precast.errors import ConfigError
from precast.fleet import Fleet, load_fleet
from precast.kafka.access import connect_as
from precast.presence import Presence
from precast.runtime import (
    OneLineParser,
    limit_malloc_arenas,
    run_cli,
    setup_logging,
    trim_malloc_every,
)
from precast.serving import MemoryStore
from precast.settings import load
from precast.telemetry.heap import register_heap_metrics
from precast.telemetry.tracing import start_tracing


@dataclass
class Built:
    service: Service
    materializer: Materializer
    app: object
    board_feed: BoardFeed | None = None
    board: Board | None = None
    edge_purger: NewestPurger | None = None


def build(settings: ApiSettings) -> Built:
    """The process from one settings object, room by room; each room's factory gets its own
    section of the options (consumer_api.settings) and the parts built before it."""
    opts, fleet = checked_options(settings)
    topics = settings.topics.catalog()
    stores = build_stores(opts.materialize_options(), settings.redis)
    hub = Hub(opts.sse_max_streams)
    leases = stores.view.leases if stores.view is not None else None
    index = build_fleet_index(opts.board_options(), fleet, leases)
    purged: list[NewestPurger] = []  # built after the materializer, whose readiness it waits on
    on_stored, on_leased = fan_out(hub, stores.view, index, purged)
    tracing = start_tracing(settings.tracing, "precast-api")
    mat = build_materializer(
        opts.materialize_options(), settings.kafka, topics, stores, on_stored, on_leased, tracing
    )
    edge_purger = build_edge_purger(settings.edge, mat)
    purged += [edge_purger] if edge_purger is not None else []
    speculation = build_speculation(
        opts.speculation_options(), settings.kafka, settings.redis, topics
    )
    svc = build_service(opts, stores.view, settings.redis, speculation, hub, probes(mat), tracing)
    board = (
        build_board(
            opts.board_options(), settings.kafka, topics, index, svc, settings.tracing.ui_url
        )
        if index is not None
        else None
    )
    feed = board.feed if board is not None else None
    if edge_purger is not None:
        svc.parts.append(edge_purger.supervised)  # /readyz names it if it gives up
        if edge_purger.leases_watched and stores.view is not None:  # it watches their leases
            svc.renderer.lease_at_edge(
                settings.edge.lease_ttl_s, settings.edge.lease_guard_ms, stores.view.leases.get
            )
    return Built(svc, mat, create_app(svc, board), feed, board, edge_purger)


def checked_options(settings: ApiSettings) -> tuple[ApiOptions, Fleet]:
    """The API's options with the fallback's strategy named (the fleet spec's default label
    when unset), refused when they cannot work together; and the fleet it serves."""
    opts = settings.api
    if not opts.local_view and not settings.redis.url:
        raise ConfigError("PRECAST_API__LOCAL_VIEW=false needs Redis (PRECAST_REDIS__URL is empty)")
    fleet = load_fleet(settings.fleet.spec)
    default_strategy = opts.default_strategy or fleet.spec.serving.default_label
    if default_strategy not in fleet.spec.labels:
        raise ConfigError(
            f"PRECAST_API__DEFAULT_STRATEGY={default_strategy!r} is not a label of fleet spec "
            f"{fleet.name!r} ({', '.join(fleet.spec.labels)})"
        )
    return opts.model_copy(update={"default_strategy": default_strategy}), fleet


def fan_out(
    hub: Hub, view: MemoryStore | None, index: FleetIndex | None, purgers: list[NewestPurger]
) -> tuple[OnStored, OnLeased]:
    """What the materializer stored, handed to the event streams, the board and the edge
    cache's purges (a lease changes no answer: the edge needs no purge for it)."""

    def on_stored(items: list) -> None:
        hub.publish_threadsafe(items)
        if index is not None:
            index.stored(items)
        for purger in purgers:
            purger.note(items)

    def on_leased(leases: list) -> None:
        if view is not None:
            hub.publish_leased_threadsafe({x.partition for x in leases}, view.peek)
        if index is not None:
            index.leased(leases)

    return on_stored, on_leased


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
    if built.edge_purger is not None:
        built.edge_purger.start()
    # The materializer, board feed and lineage reads assign partitions: no consumer group
    # shows them, so they say themselves what they read (the operator tools' guard).
    topics = settings.topics.catalog()
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
        if built.edge_purger is not None:
            built.edge_purger.stop()
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
