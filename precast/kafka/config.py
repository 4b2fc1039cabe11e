"""librdkafka configuration, built once from settings. Each non-obvious default says why."""

from __future__ import annotations

from typing import Any

from precast.settings import KafkaSettings

# Java-client-compatible partitioning. librdkafka's default (`consistent_random`, CRC32) puts
# the same key on a different partition than the Java client, Kafka Streams and aiokafka, which
# silently breaks co-partitioned joins by device ID.
PARTITIONER = "murmur2_random"

# Every client (producer, consumer, admin). When a broker dies, its partitions get new leaders
# once the controller fences it (broker.session.timeout.ms). A client asks for metadata once
# when its connection drops (too early: the answer still names the dead leader), then learns
# the new leader only from librdkafka's once-a-second scan of partitions whose broker is down,
# and a consumer takes one more scan to leave the dead broker (its partition passes through the
# internal broker first): 1-2 s after the election in the cluster benchmark, measured with
# librdkafka's debug log. A periodic metadata refresh every 500 ms (default 5 minutes) brings
# both under half a second; it costs one small Metadata request per client per 500 ms
# (docs/cluster.md, "Failover time").
CLIENT_DEFAULTS: dict[str, Any] = {
    "topic.metadata.refresh.interval.ms": 500,
    # librdkafka forgets a topic whose metadata is older than this, and it defaults to three
    # refresh intervals: 1.5 s with the 500 ms above. A kill -9 of the active controller left
    # the survivors without fresh answers for longer than that, and a producer then marked the
    # topic unknown ("metadata information timed out (1520ms old)" in its debug log): every
    # record of every partition, not only the dead leader's, waited in its unassigned queue
    # until the metadata came back, and the first partitions it assigned passed through the
    # internal broker again (issue 36: 5 s with no answer on any partition). A known topic
    # keeps its last metadata (librdkafka's own default age, 15 minutes); the periodic refresh
    # still brings the new leaders as soon as a survivor has them.
    "metadata.max.age.ms": 900_000,
}

PRODUCER_DEFAULTS: dict[str, Any] = {
    "partitioner": PARTITIONER,
    # No duplicates or reordering on retries, and acks from all in-sync replicas.
    "enable.idempotence": True,
    "acks": "all",
    # A few ms of linger lets librdkafka build real batches at 10k+ msg/s without adding
    # visible latency to a ~1 s heartbeat cadence.
    "linger.ms": 5,
    "batch.size": 256 * 1024,
    # lz4: cheap on CPU, good ratio on JSON. Consumers built on aiokafka need cramjam for it.
    "compression.type": "lz4",
    # Bounded memory: when this many records wait, produce() raises BufferError and our
    # wrapper makes the caller wait (backpressure) instead of growing or dropping.
    "queue.buffering.max.messages": 200_000,
    "queue.buffering.max.kbytes": 256 * 1024,
    # Retry for up to two minutes (a broker restart) before a delivery is reported failed.
    "delivery.timeout.ms": 120_000,
    # Only failed deliveries call back into Python: success is known from flush() == 0.
    "delivery.report.only.error": True,
}

CONSUMER_DEFAULTS: dict[str, Any] = {
    "auto.offset.reset": "earliest",
    # Offsets are committed by the application after its outputs are acknowledged.
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    # Cooperative rebalancing keeps unaffected partitions flowing while a member joins/leaves.
    "partition.assignment.strategy": "cooperative-sticky",
    # Detect a dead member in ~10 s instead of 45 s, so its partitions move quickly. Not lower:
    # librdkafka also ends the session itself when the coordinator has not answered for this
    # long, and a kill -9 of a broker that was both the active controller and the group's
    # coordinator left the group without one for about 6 s (a new controller is elected, counts
    # the dead node's 3 s session from its own start, then the coordinator moves and loads).
    # At 6 s every worker lost its partitions and rejoined, and answers took 12-13.5 s instead
    # of ~7 (python -m bench cluster; docs/cluster.md, "Failover time").
    "session.timeout.ms": 10_000,
    "heartbeat.interval.ms": 1_000,
    # A fetch returns at its first byte (min 1), so the wait below is only how long an idle
    # fetch is parked at the broker before the next is sent: it adds no latency to a record.
    # At 50 ms an idle worker and read API (6 topics x 6 partitions) cost the broker 250 ms of
    # CPU per second, a quarter of a core of a 2-core machine that every hop then waited for;
    # at librdkafka's 500 ms they cost it nothing measurable (docs/workers.md, "Idle fetches").
    "fetch.min.bytes": 1,
    "fetch.wait.max.ms": 500,
    "queued.max.messages.kbytes": 64 * 1024,
    # Once a partition's queue passes queued.min.messages or queued.max.messages.kbytes,
    # librdkafka postpones its next fetch by this long: 1 s by default, although a worker drains
    # a full queue in well under a second and then sits idle for the rest of that timer. That
    # timer, not the CPU, then set the pace of every consumer catching up (a 26x slower rebuild
    # with the bounded prefetch below; docs/workers.md, "Where the time goes").
    "fetch.queue.backoff.ms": 10,
    "enable.partition.eof": False,
}


# For a consumer that may fall behind in a process that must keep a small, flat footprint (the
# read API's materializer and board feed share two cores with the read path). librdkafka
# prefetches until 100,000 records wait (queued.min.messages) and checks its byte limit only
# between fetches, and one fetch brings up to 1 MiB of lz4 per partition, which decompresses to
# tens of thousands of records: a lagging API replica held 100-300 MiB that way (measured with
# the consumer's own fetchq statistics; docs/workers.md, "Memory"). These keep a few thousand
# records waiting (a few MiB) and still fill a 5,000-record batch per consume.
BOUNDED_PREFETCH: dict[str, Any] = {
    "queued.min.messages": 5_000,
    "queued.max.messages.kbytes": 8 * 1024,
    "max.partition.fetch.bytes": 64 * 1024,
}


def prefetch_bound(records: int) -> dict[str, Any]:
    """BOUNDED_PREFETCH scaled to another record threshold (the worker keeps 20,000: four of
    its consume batches, as fast over a backlog as librdkafka's 100,000, measured)."""
    scale = max(1, records // BOUNDED_PREFETCH["queued.min.messages"])
    return {
        "queued.min.messages": records,
        "queued.max.messages.kbytes": BOUNDED_PREFETCH["queued.max.messages.kbytes"] * scale,
        "max.partition.fetch.bytes": min(1024 * 1024, 64 * 1024 * scale),
    }


# For a consumer nobody waits on (the board feed's device info and context, a benchmark's
# reader): a fetch returns once 64 KiB are there or after 100 ms, instead of at every record.
# Each fetch response is a request for the broker and a wakeup of the consumer's threads; at a
# light load, with a record every few hundred microseconds, those per-record costs were most of
# the CPU an event cost the read API and the broker (docs/workers.md, "Where the time goes").
BACKGROUND_FETCH: dict[str, Any] = {
    "fetch.min.bytes": 64 * 1024,
    "fetch.wait.max.ms": 100,
}


def producer_config(settings: KafkaSettings, **overrides: Any) -> dict[str, Any]:
    conf = {**CLIENT_DEFAULTS, **PRODUCER_DEFAULTS, **settings.client_config(), **overrides}
    # settings.extra is the user's last word, even over per-component overrides.
    conf.update(settings.extra)
    return conf


def consumer_config(settings: KafkaSettings, group_id: str, **overrides: Any) -> dict[str, Any]:
    conf = {
        **CLIENT_DEFAULTS,
        **CONSUMER_DEFAULTS,
        **settings.client_config(),
        "group.id": group_id,
        **overrides,
    }
    conf.update(settings.extra)
    return conf


def admin_config(settings: KafkaSettings, **overrides: Any) -> dict[str, Any]:
    conf = {**CLIENT_DEFAULTS, **settings.client_config(), **overrides}
    conf.update(settings.extra)
    return conf
