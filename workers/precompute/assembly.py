"""A worker from its parts, read top-down: the delivery sink, the consumer, the pipeline, the
rebalancer, the output, the lease publisher, the loop. `workers.precompute.cli.build` calls it
with what the settings say; tests and benchmarks call it with their own configs, and the shadow
run with its own output, clock and consumer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from precast.fleet import Fleet
from precast.kafka import Consumer, KafkaMessage, TopicPartitionOffset
from precast.settings import KafkaSettings
from precast.telemetry.tracing import Tracing
from schemas.deadletters import Reason
from schemas.topics import Topics
from workers.model.registry import ModelRegistry
from workers.precompute.config import LoopConfig, PipelineConfig
from workers.precompute.ingest.router import input_topics
from workers.precompute.loop import Worker, wall_ms
from workers.precompute.outputs import Clock, Output, PredictionOutput
from workers.precompute.pipeline import Pipeline, build_pipeline
from workers.precompute.publish.delivery import AtLeastOnce, ExactlyOnce
from workers.precompute.publish.lease_publisher import LeasePublisher
from workers.precompute.rebalance import Membership, Rebalancer
from workers.precompute.state.restore import StateRestorer


@dataclass(frozen=True)
class LoopParts:
    """What an output is made from (`make_output`)."""

    pipeline: Pipeline
    registry: ModelRegistry
    sink: AtLeastOnce | ExactlyOnce
    consumer: Consumer
    topics: Topics
    cfg: LoopConfig
    clock: Clock
    rebalancer: Rebalancer
    tracing: Tracing


def prediction_output(parts: LoopParts) -> Output:
    """The worker's own output: predictions and worker state through the delivery sink."""
    return PredictionOutput(
        parts.pipeline,
        parts.registry,
        parts.sink,
        parts.consumer,
        parts.topics.predictions.name,
        parts.topics.worker_state.name,
        parts.cfg,
        parts.clock,
        rewind=parts.rebalancer.rewind,
        tracing=parts.tracing,
    )


def assemble(
    kafka: KafkaSettings,
    topics: Topics,
    registry: ModelRegistry,
    pipeline: PipelineConfig | None = None,
    cfg: LoopConfig | None = None,
    *,
    assignment: list[TopicPartitionOffset] | None = None,
    stop_at: dict[tuple[str, int], int] | None = None,
    fleet: Fleet | None = None,
    clock: Clock = wall_ms,
    make_output: Callable[[LoopParts], Output] = prediction_output,
    wrap_consumer: Callable[[Consumer], Any] | None = None,
    reader: str = "worker",
    tracing: Tracing | None = None,
) -> Worker:
    cfg = cfg or LoopConfig()
    tracing = tracing or Tracing.off()
    sink: AtLeastOnce | ExactlyOnce = (
        ExactlyOnce(
            kafka,
            topics.dead_letters.name,
            cfg.transactional_id,
            cfg.transaction_timeout_ms,
            cfg.linger_ms,
        )
        if cfg.exactly_once
        else AtLeastOnce(kafka, topics.dead_letters.name, cfg.linger_ms)
    )
    overrides: dict[str, Any] = {"partition.assignment.strategy": "range"}
    if cfg.exactly_once:
        overrides["isolation.level"] = "read_committed"
    # A bounded prefetch: a worker that lags by 100k records held them all (librdkafka
    # fetches ahead until 100,000 wait), +15-18 % RSS in the one-core soak; 20,000 keep a
    # backlog drain as fast (docs/workers.md, "Memory").
    consumer = Consumer(kafka, cfg.group_id, bounded_prefetch=20_000, **overrides)
    if wrap_consumer is not None:
        consumer = wrap_consumer(consumer)
    output: Output | None = None  # made below, from the pipeline that rejects through it

    def reject(msg: KafkaMessage, reason: Reason, detail: str) -> None:
        assert output is not None
        output.reject(msg, reason, detail)

    pipe = build_pipeline(topics, pipeline or PipelineConfig(), reject, fleet, reader)
    membership = Membership()

    def restorer() -> StateRestorer:
        return StateRestorer(kafka, topics.worker_state.name, read_committed=cfg.exactly_once)

    rebalancer = Rebalancer(
        consumer,
        pipe,
        sink,
        topics.device_context.name,
        membership,
        restorer if cfg.worker_state else None,
    )
    output = make_output(
        LoopParts(pipe, registry, sink, consumer, topics, cfg, clock, rebalancer, tracing)
    )
    leases = LeasePublisher(pipe.lease_book, sink, topics.predictions.name)
    return Worker(
        consumer,
        list(input_topics(topics)),
        pipe,
        registry,
        sink,
        output,
        rebalancer,
        leases,
        membership,
        cfg,
        clock=clock,
        assignment=assignment,
        stop_at=stop_at,
        tracing=tracing,
    )
