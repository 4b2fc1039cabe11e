"""What shapes a worker: its pipeline (policy, batching, horizon, top-K) and its loop (group,
consume sizes, commit interval, delivery mode), as frozen views of its settings. Every default
a setting has lives once, in the settings model (workers.settings); `pipeline_config` and
`loop_config` build the views from a settings object, the one place that reads it field by
field (units converted: ms settings, s configs where the code counts seconds)."""

from __future__ import annotations

from dataclasses import dataclass

from precast.fleet import Fleet
from schemas.events import MAX_AHEAD_MS
from workers.settings import PolicyOptions, WorkerOptions, WorkerSettings

_DEFAULT = WorkerOptions()
_POLICY = PolicyOptions()


@dataclass(frozen=True)
class PolicyConfig:
    """The policy's frozen view of its settings (`from_options`), plus what only bounded runs
    set (`always`) and what no setting exposes (`hot_top_k`)."""

    min_change: float = _POLICY.min_change  # material change, when sensitivities are unknown
    refresh_lead_ms: int = _POLICY.refresh_lead_ms
    throttle_ms: int = _POLICY.throttle_ms
    # Answer-aware skip (workers.model.sensitivity): a device predicts when the estimated new top-1
    # gap is within `safety` x its uncertainty (cold devices) or `hot_safety` x (devices read or
    # watched). `safety` is the main knob: lower skips more and risks more disagreement (the
    # curve is in BENCHMARKS.md). `hot_top_k` also guards hot devices' top-K set.
    safety: float = _POLICY.safety
    hot_safety: float = _POLICY.hot_safety
    hot_top_k: bool = False
    # A move this large (in change-scale units) predicts whatever the bound says.
    max_change: float = _POLICY.max_change
    # Backfill/replay: every device with input gets a prediction (no skip, no throttle).
    always: bool = False
    # Baseline: every fresh heartbeat predicts (no skip, no renewal).
    every_event: bool = _POLICY.every_event

    @classmethod
    def from_options(cls, options: PolicyOptions) -> PolicyConfig:
        return cls(
            min_change=options.min_change,
            refresh_lead_ms=options.refresh_lead_ms,
            throttle_ms=options.throttle_ms,
            safety=options.safety,
            hot_safety=options.hot_safety,
            max_change=options.max_change,
            every_event=options.every_event,
        )


@dataclass(frozen=True)
class LeaseConfig:
    """Validity leases (workers.precompute.publish.lease_book). `enabled=False` is the older way: every
    stable answer near expiry is published again as a whole PredictionSet."""

    enabled: bool = _DEFAULT.renewal == "lease"
    interval_ms: int = _DEFAULT.lease_interval_ms  # one lease per partition this often
    # no lease extends an answer longer after its data time
    max_extension_ms: int = round(_DEFAULT.lease_max_extension_s * 1000)


@dataclass(frozen=True)
class PipelineConfig:
    policy: PolicyConfig = PolicyConfig()
    max_batch: int = _DEFAULT.batch_max
    max_queue_delay_s: float = _DEFAULT.max_queue_delay_ms / 1000.0
    preferred_batch_sizes: tuple[int, ...] = _DEFAULT.preferred_batch_sizes
    # the built-in fleet's serving horizon and top-K (a settings object: its fleet spec's)
    horizon_ms: int = 5_000
    top_k: int = 3
    backfill: bool = False
    # event times ahead of the worker's clock by more than this are dead-lettered
    max_ahead_ms: int = MAX_AHEAD_MS
    lease: LeaseConfig = LeaseConfig()
    # a request for a device without data waits this long for it, at most this many devices
    request_wait_s: float = _DEFAULT.request_wait_s
    request_wait_max: int = _DEFAULT.request_wait_max


@dataclass(frozen=True)
class LoopConfig:
    group_id: str = _DEFAULT.group_id
    consume_max: int = _DEFAULT.consume_max
    poll_timeout_s: float = _DEFAULT.poll_timeout_s
    commit_interval_s: float = _DEFAULT.commit_interval_ms / 1000.0
    exactly_once: bool = _DEFAULT.exactly_once
    transactional_id: str = "precast-worker"
    transaction_timeout_ms: int = _DEFAULT.transaction_timeout_ms
    linger_ms: float = _DEFAULT.linger_ms  # the predictions producer's linger
    lag_interval_s: float = 5.0
    # write the worker-state changelog with every prediction and restore from it on assignment
    worker_state: bool = True


def pipeline_config(settings: WorkerSettings, fleet: Fleet) -> PipelineConfig:
    """The pipeline's view of a worker's settings; horizon and top-K fall back to the fleet
    spec's serving section, the event-time tolerance is the spec's."""
    w, serving = settings.worker, fleet.spec.serving
    return PipelineConfig(
        policy=PolicyConfig.from_options(settings.policy),
        max_batch=w.batch_max,
        max_queue_delay_s=w.max_queue_delay_ms / 1000.0,
        preferred_batch_sizes=w.preferred_batch_sizes,
        horizon_ms=int((w.horizon_s or serving.horizon_s) * 1000),
        top_k=settings.model.top_k or serving.top_k,
        max_ahead_ms=round(fleet.spec.time.max_ahead_s * 1000),
        request_wait_s=w.request_wait_s,
        request_wait_max=w.request_wait_max,
        lease=LeaseConfig(
            enabled=w.renewal == "lease",
            interval_ms=w.lease_interval_ms,
            max_extension_ms=round(w.lease_max_extension_s * 1000),
        ),
    )


def loop_config(settings: WorkerSettings, instance: str) -> LoopConfig:
    """The loop's view of a worker's settings; `instance` names this member in its
    transactional.id (exactly-once)."""
    w = settings.worker
    return LoopConfig(
        group_id=w.group_id,
        consume_max=w.consume_max,
        poll_timeout_s=w.poll_timeout_s,
        commit_interval_s=w.commit_interval_ms / 1000.0,
        exactly_once=w.exactly_once,
        transactional_id=f"{settings.topics.prefix}{w.group_id}.{instance}",
        transaction_timeout_ms=w.transaction_timeout_ms,
        linger_ms=w.linger_ms,
    )
