"""Materializing: the predictions topic read into the serving stores (the in-process view and
the shared Redis store), handing what it stored to the read path and the board."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from consumer_api.materialize.gate import GateConfig
from consumer_api.materialize.gated import GateSource
from consumer_api.materialize.letters import letters_producer
from consumer_api.materialize.materializer import Materializer, OnLeased, OnStored
from consumer_api.materialize.source import replica_group
from consumer_api.settings import MaterializeOptions
from precast.edge_cache.purge import EdgePurge, NewestPurger
from precast.priority import built_below
from precast.serving import MemoryStore, RedisStore
from precast.settings import EdgeSettings, KafkaSettings, RedisSettings
from precast.telemetry.tracing import Tracing
from schemas.topics import Topics

Probe = Callable[[], tuple[bool, dict]]


@dataclass
class Stores:
    """Where answers are kept: the in-process view (unless reads go to Redis) and the shared
    Redis store (when Redis is configured)."""

    view: MemoryStore | None
    shared: RedisStore | None


def build_stores(opts: MaterializeOptions, redis: RedisSettings) -> Stores:
    return Stores(
        MemoryStore(opts.grace_ms) if opts.local_view else None,
        RedisStore.from_settings(redis, opts.grace_ms) if redis.url else None,
    )


def build_materializer(
    opts: MaterializeOptions,
    kafka: KafkaSettings,
    topics: Topics,
    stores: Stores,
    on_stored: OnStored,
    on_leased: OnLeased,
    tracing: Tracing | None = None,
) -> Materializer:
    """The replica's materializer; with `opts.gate`, reading on through a gate process that
    rejects and dead-letters in its place once it has caught up."""
    gate = (
        GateSource(
            GateConfig(
                kafka,
                topics.predictions.name,
                replica_group(opts.group_id),
                topics.dead_letters.name,
                opts.batch,
                opts.wait_s,
                opts.nice,
                logging.getLevelName(logging.getLogger().getEffectiveLevel()),
            ),
            topics.predictions.partitions,
        )
        if opts.gate
        else None
    )
    return Materializer(
        kafka,
        topics.predictions.name,
        topics.predictions.partitions,
        view=stores.view,
        shared=stores.shared,
        group_prefix=opts.group_id,
        # its own letters while it catches up; the gate's from then on
        producer=built_below(opts.nice, lambda: letters_producer(kafka), "letters-build"),
        dead_letter_topic=topics.dead_letters.name,
        on_stored=on_stored,
        on_leased=on_leased,
        batch=opts.batch,
        wait_s=opts.wait_s,
        ready_max_lag=opts.ready_max_lag,
        tracing=tracing,
        nice=opts.nice,
        live_source=gate,
    )


def build_edge_purger(edge: EdgeSettings, mat: Materializer) -> NewestPurger | None:
    """The replica's newest-wins purges at the edge cache, when one is configured: the devices
    whose newest answer it stored, batched (precast.edge_cache.purge); with
    PRECAST_EDGE__LEASE_TTL_S and an in-process view, also its partitions' leased copies
    before a lease would lapse (`leases_watched`)."""
    if not edge.purge_urls:
        return None
    book = mat.view.leases if mat.view is not None and edge.lease_ttl_s else None
    return NewestPurger(
        EdgePurge(edge, "api"),
        edge.purge_interval_ms,
        lambda: mat.ready,
        leases=book.leases if book is not None else None,
        lease_guard_ms=edge.lease_guard_ms,
    )


def probes(mat: Materializer) -> tuple[Probe, Probe]:
    """The process's readiness and health as the materializer decides them."""

    def readiness() -> tuple[bool, dict]:
        return mat.ready, {
            "lag": mat.lag,
            "devices": len(mat.view) if mat.view is not None else None,
            "redis": None if mat.shared is None else ("up" if mat.redis_up else "down"),
        }

    def health() -> tuple[bool, dict]:
        # What is down, never why: the reason is logged (it may quote a broker or a record).
        return mat.error is None, {} if mat.error is None else {"down": ["materializer"]}

    return readiness, health
