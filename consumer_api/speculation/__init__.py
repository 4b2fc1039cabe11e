"""Speculative work asked of the workers: precompute requests within a budget shared by the
replicas, and read hints (which devices clients read, prefetch or watch)."""

from __future__ import annotations

from dataclasses import dataclass

from consumer_api.settings import SpeculationOptions
from consumer_api.speculation.precompute_budget import Budget, LocalBudget, RedisBudget
from consumer_api.speculation.precompute_requests import PrecomputeAsker
from consumer_api.speculation.read_hints import ReadHints
from precast.kafka import Producer
from precast.redis_client import connect_async
from precast.settings import KafkaSettings, RedisSettings
from schemas.topics import Topics


@dataclass
class Speculation:
    asker: PrecomputeAsker
    hints: ReadHints


def build_speculation(
    opts: SpeculationOptions, kafka: KafkaSettings, redis: RedisSettings, topics: Topics
) -> Speculation:
    """The asker (within a budget shared through Redis when there is one) and the read hints."""
    budget: Budget = (
        RedisBudget(connect_async(redis), redis.key_prefix, opts.budget_per_s, opts.burst)
        if redis.url
        else LocalBudget(opts.budget_per_s, opts.burst)
    )
    producer = Producer(kafka)  # precompute requests and read hints share one client
    asker = PrecomputeAsker(
        producer, topics.precompute_requests.name, opts.request_window_ms, budget=budget
    )
    return Speculation(asker, ReadHints(producer, topics.read_hints.name, opts.hot_for_ms))
