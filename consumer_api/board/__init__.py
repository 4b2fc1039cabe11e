"""The operations-center board: its page (static/), its endpoints and OpenAPI paths, what it
shows of a fleet (layout, fleet index, device view, history) and what it reads from Kafka
besides predictions (the board feed, lineage). See docs/board.md."""

from __future__ import annotations

from consumer_api.board.board_layout import BoardLayout
from consumer_api.board.feed import BoardFeed
from consumer_api.board.fleet_index import FleetIndex
from consumer_api.board.lineage import LineageReader
from consumer_api.board.routes import Board

__all__ = ["Board", "FleetIndex", "build_board", "build_fleet_index"]
from consumer_api.read.service import Service
from consumer_api.settings import BoardOptions
from precast.fleet import Fleet
from precast.serving import LeaseBook
from precast.settings import KafkaSettings
from schemas.topics import Topics


def build_fleet_index(
    opts: BoardOptions, fleet: Fleet, leases: LeaseBook | None
) -> FleetIndex | None:
    """The board's picture of the fleet (None: no board); built before the materializer,
    which hands it what it stores."""
    if not opts.enabled:
        return None
    return FleetIndex(
        default_strategy=opts.default_strategy,
        serve_stale=opts.serve_stale,
        grace_ms=opts.grace_ms,
        layout=BoardLayout(fleet),
        history_depth=opts.history_depth,
        history_devices=opts.history_devices,
        leases=leases,
    )


def build_board(
    opts: BoardOptions,
    kafka: KafkaSettings,
    topics: Topics,
    index: FleetIndex,
    svc: Service,
    trace_url: str = "",
) -> Board:
    """The board over `index`: its feed (device context, heartbeat fields, rates) and its
    lineage reads."""
    feed = BoardFeed(kafka, topics, index, group_prefix=opts.group_id)
    svc.parts.append(feed.supervised)  # /readyz turns false once the board feed gives up
    event_roles = {t.name: t.role for t in topics.events()}  # lineage names only these
    return Board(
        index,
        feed,
        LineageReader(kafka, set(event_roles), opts.group_id),
        max_rows=opts.max_rows,
        queue_max=opts.queue_max,
        frame_s=opts.frame_s,
        event_roles=event_roles,
        trace_url=trace_url,
    )
