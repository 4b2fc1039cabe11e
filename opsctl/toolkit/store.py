"""The serving store and the predictions topic as the SRE tools see them."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from opsctl.settings import StackCliSettings
from opsctl.toolkit.guard import partitions_of
from opsctl.toolkit.ranges import OffsetRange
from opsctl.toolkit.reader import RangeReader, range_consumer
from precast.errors import ConfigError
from precast.guard import Guard
from precast.kafka import Admin
from precast.serving import (
    Entry,
    Lease,
    MemoryStore,
    RedisStore,
    entry_from_prediction,
    lease_from_record,
)
from precast.telemetry.progress import bar
from schemas.leases import is_lease_key

log = logging.getLogger("precast.ops.store")
# rebuild and the operator tools' topic view: unusable records counted and logged (bounded)
GUARD = Guard("ops-predictions", log)


def grace_ms(settings: StackCliSettings) -> int:
    return int(settings.ops.store_grace_s * 1000)


def shared_store(settings: StackCliSettings, what: str) -> RedisStore:
    """The Redis serving store every API replica shares; the tools need it to change served state."""
    if not settings.redis.url:
        raise ConfigError(
            f"{what} needs the shared serving store: set PRECAST_REDIS__URL (API replicas "
            f"without Redis keep in-process views that follow the predictions topic)"
        )
    from precast.redis_client import wait_reachable

    wait_reachable(settings.redis)
    return RedisStore.from_settings(settings.redis, grace_ms(settings))


def predictions_topic(settings: StackCliSettings) -> tuple[str, int]:
    name = settings.topics.catalog().predictions.name
    admin = Admin(settings.kafka)
    admin.wait_reachable()
    return name, partitions_of(
        admin, name, settings.kafka.bootstrap_servers, " (PRECAST_TOPICS__PREFIX)"
    )


@dataclass
class PredictionReader:
    """The predictions topic from its beginning to the end it has now, as store entries in
    batches; tombstones and records the store cannot hold are skipped and counted. Validity
    leases are kept aside (`leases`, the newest per partition once the iteration ended): a
    store takes them after the entries, as the materializer does."""

    settings: StackCliSettings
    label: str
    progress: bool = True
    batch: int = 2_000
    records: int = 0
    tombstones: int = 0
    invalid: int = 0
    topic: str = ""
    leases: dict[int, Lease] = field(default_factory=dict)

    def __iter__(self) -> Iterator[list[tuple[str, Entry]]]:
        self.topic, parts = predictions_topic(self.settings)
        ends = Admin(self.settings.kafka).end_offsets([(self.topic, p) for p in range(parts)])
        ranges = [OffsetRange(p, 0, ends[(self.topic, p)]) for p in range(parts)]
        c = range_consumer(self.settings.kafka, self.label.replace(" ", "-"))
        pb = bar(sum(r.size for r in ranges), self.label, enabled=self.progress)
        out: list[tuple[str, Entry]] = []
        try:
            for msgs in RangeReader(c, self.topic, ranges):
                now = int(time.time() * 1000)
                for m in msgs:
                    value, key = m.value(), m.key()
                    if not value or not key:
                        self.tombstones += 1
                        continue
                    try:
                        if is_lease_key(key):
                            self._lease(lease_from_record(value, key, now, m.offset()))
                        else:
                            out.append((key.decode(), entry_from_prediction(value, now, key)))
                    except Exception as exc:  # noqa: BLE001 - the boundary (precast.guard)
                        # whatever a record holds (the materializers dead-letter it, not this)
                        self.invalid += 1
                        GUARD.reject(exc, m)
                self.records += len(msgs)
                pb.update(len(msgs))
                if len(out) >= self.batch:
                    yield out
                    out = []
            if out:
                yield out
        finally:
            pb.close()
            c.close()

    def _lease(self, x: Lease) -> None:
        cur = self.leases.get(x.partition)
        if cur is None or x.order > cur.order:
            self.leases[x.partition] = x


def topic_view(settings: StackCliSettings, progress: bool) -> MemoryStore:
    """Newest-wins view of the predictions topic, built here as a read API replica would."""
    view = MemoryStore(grace_ms(settings))
    reader = PredictionReader(settings, "read predictions", progress)
    for items in reader:
        view.put_many_if_newer(items)
    view.put_leases(list(reader.leases.values()))
    return view
