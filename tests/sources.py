"""Materializers for tests without a broker: a `Source` (consumer_api.materialize.source) that
reads nothing, and a materializer built as the app builds it."""

from __future__ import annotations

import time

from consumer_api.materialize import build_materializer, build_stores
from consumer_api.materialize.materializer import Materializer
from consumer_api.materialize.source import Taken
from consumer_api.settings import ApiSettings


class StillSource:
    """Nothing to read: `take` waits `wait_s` and returns no record."""

    def __init__(self, wait_s: float = 0.0) -> None:
        self.wait_s = wait_s

    def start(self) -> None:
        return

    def take(self, *_: object) -> Taken:
        if self.wait_s:
            time.sleep(self.wait_s)
        return Taken([])

    def assign(self, *_: object) -> None:
        return

    def high_watermarks(self) -> dict[int, int]:
        return {}

    def close(self) -> None:
        return


def built_materializer(settings: ApiSettings) -> Materializer:
    """A replica's materializer as the app builds it from `settings`, without Redis (nothing
    started: its clients are built, its thread is not)."""
    opts = settings.api.materialize_options()
    return build_materializer(
        opts,
        settings.kafka,
        settings.topics.catalog(),
        build_stores(opts, settings.redis.model_copy(update={"url": ""})),
        lambda stored: None,
        lambda leased: None,
    )
