"""What shapes a worker: its pipeline (policy, batching, horizon, top-K) and its loop (group,
consume sizes, commit interval, delivery mode)."""

from __future__ import annotations

from dataclasses import dataclass

from schemas.events import MAX_AHEAD_MS
from workers.precompute import policy
from workers.precompute.delivery import LINGER_MS


@dataclass(frozen=True)
class LeaseConfig:
    """Validity leases (workers.precompute.leases). `enabled=False` is the older way: every
    stable answer near expiry is published again as a whole PredictionSet."""

    enabled: bool = True
    interval_ms: int = 1_000  # one lease per partition this often
    max_extension_ms: int = 900_000  # no lease extends an answer longer after its data time


@dataclass(frozen=True)
class PipelineConfig:
    policy: policy.PolicyConfig = policy.PolicyConfig()
    max_batch: int = 2_000
    max_queue_delay_s: float = 0.0
    preferred_batch_sizes: tuple[int, ...] = ()
    horizon_ms: int = 5_000
    top_k: int = 3
    backfill: bool = False
    # event times ahead of the worker's clock by more than this are dead-lettered
    max_ahead_ms: int = MAX_AHEAD_MS
    lease: LeaseConfig = LeaseConfig()
    # a request for a device without data waits this long for it, at most this many devices
    request_wait_s: float = 30.0
    request_wait_max: int = 10_000


@dataclass(frozen=True)
class LoopConfig:
    group_id: str = "precast-workers"
    consume_max: int = 5_000
    poll_timeout_s: float = 0.1
    commit_interval_s: float = 0.2
    exactly_once: bool = False
    transactional_id: str = "precast-worker"
    transaction_timeout_ms: int = 10_000
    linger_ms: float = LINGER_MS  # the predictions producer's linger
    lag_interval_s: float = 5.0
    # write the worker-state changelog with every prediction and restore from it on assignment
    worker_state: bool = True
