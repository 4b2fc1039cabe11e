"""The read path: the service the endpoints share (where answers come from), the hot
single-device GET, how an answer is rendered, the live-update hub and event-stream slots, and
the response models the OpenAPI document is generated from."""

from __future__ import annotations

from collections.abc import Callable

from consumer_api.read.hub import Hub
from consumer_api.read.service import Service
from consumer_api.settings import ApiOptions
from consumer_api.speculation import Speculation
from precast.serving import AsyncRedisReader, LocalView
from precast.settings import RedisSettings
from precast.telemetry.tracing import Tracing

Probe = Callable[[], tuple[bool, dict]]


def build_service(
    opts: ApiOptions,
    view: LocalView | None,
    redis: RedisSettings,
    speculation: Speculation,
    hub: Hub,
    probes: tuple[Probe, Probe],
    tracing: Tracing | None = None,
) -> Service:
    """The service the endpoints share: reads from `view`, or from Redis when there is none;
    with `tracing` on, reads and the board's beacons make spans."""
    readiness, health = probes
    return Service(
        opts,
        view,
        None if opts.local_view else AsyncRedisReader(redis),
        speculation.asker,
        readiness=readiness,
        health=health,
        hub=hub,
        hints=speculation.hints,
        tracing=tracing or Tracing.off(),
    )
