"""Baseline: what the local broker and client do bare, and what the adapter wrappers cost."""

from __future__ import annotations

import time

from bench.support.harness import Context, Figure, Report, progress

NAME = "kafka"
DESCRIPTION = "raw confluent-kafka produce/consume vs the precast.kafka wrappers, same run"


# What the figures need of the machine (the "Spare CPU" note of each BENCHMARKS.md section).
SPARE_CPU = (
    "both cores free: the loop's process and the broker each need most of one (the ratios are "
    "within one run, so they hold on a busier machine; the msgs/s do not)."
)


def _produce_raw(raw, topic: str, keys: list[bytes], value: bytes) -> float:
    t0 = time.perf_counter()
    for k in keys:
        while True:
            try:
                raw.produce(topic, value, k)
                break
            except BufferError:
                raw.poll(0.01)
        raw.poll(0)
    raw.flush()
    return len(keys) / (time.perf_counter() - t0)


def _produce_wrapped(producer, topic: str, keys: list[bytes], value: bytes) -> float:
    t0 = time.perf_counter()
    for k in keys:
        producer.produce(topic, k, value)
        producer.poll(0)
    producer.flush()
    return len(keys) / (time.perf_counter() - t0)


def _consume(consumer, topic: str, partitions: int, n: int) -> float:
    from precast.kafka import OFFSET_BEGINNING, TopicPartitionOffset

    consumer.assign([TopicPartitionOffset(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got, t0 = 0, time.perf_counter()
    while got < n:
        got += len(consumer.consume(10_000, 1.0))
    return n / (time.perf_counter() - t0)


def run(ctx: Context) -> Report:
    from precast.kafka import Admin, Consumer, Producer

    n = 50_000 if ctx.quick else 300_000
    partitions = 6
    settings = ctx.kafka_settings()
    admin = Admin(settings)
    topics = [ctx.unique("kafka-raw"), ctx.unique("kafka-wrapped")]
    for t in topics:
        admin.create_topic(t, partitions)
    keys = [f"dev-{i % 10_000:06d}".encode() for i in range(n)]
    value = b"x" * 300  # about one heartbeat
    rows: list[list] = []
    rates: dict[str, float] = {}
    try:
        for rnd in range(2):  # alternate A/B twice; keep the better of each (noisy 2-core box)
            progress(f"round {rnd + 1}: produce {n:,} x 300 B")
            raw = _produce_raw(Producer(settings).raw, topics[0], keys, value)
            wrapped = _produce_wrapped(Producer(settings), topics[1], keys, value)
            rates["raw"] = max(rates.get("raw", 0), raw)
            rates["wrapped"] = max(rates.get("wrapped", 0), wrapped)
        c1 = Consumer(settings, ctx.unique("g"))
        rates["consume"] = _consume(c1, topics[0], partitions, n)
        c1.close()
    finally:
        admin.delete_topics(topics)
    rows = [
        ["confluent-kafka produce loop (bare)", rates["raw"], 1.0],
        ["precast.kafka.Producer.produce", rates["wrapped"], rates["wrapped"] / rates["raw"]],
        [
            "precast.kafka.Consumer.consume (batches of 10k)",
            rates["consume"],
            rates["consume"] / rates["raw"],
        ],
    ]
    return Report(
        title="Kafka baseline (local single-node broker)",
        columns=["loop", "msgs/s", "ratio to bare produce"],
        rows=rows,
        figures=[
            Figure(
                "kafka_raw_produce_msgs_per_s",
                round(rates["raw"]),
                "msgs/s",
                "-",
                f"{n} x 300 B, 6 partitions, lz4, acks=all, idempotent",
            ),
            Figure(
                "kafka_wrapper_vs_raw_produce",
                round(rates["wrapped"] / rates["raw"], 3),
                "ratio",
                "bare confluent-kafka produce loop",
                "same messages, same run",
            ),
            Figure(
                "kafka_consume_msgs_per_s",
                round(rates["consume"]),
                "msgs/s",
                "-",
                f"{n} x 300 B from 6 partitions, consume(10000)",
            ),
        ],
        notes=[
            "Producer settings are precast's defaults (murmur2, idempotent, lz4, linger 5 ms) for both loops."
        ],
    )
