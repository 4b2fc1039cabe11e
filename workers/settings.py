"""Settings of a worker process (built once, in `workers.precompute.cli`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from precast.settings import CommonSettings, Section

DEFAULT_MODEL_DIR = Path(__file__).parent / "models" / "fleet-strategy" / "1.0.0"


class ModelOptions(Section):
    # A folder holding model.onnx and manifest.json (see docs/models.md to bring your own).
    path: Path = DEFAULT_MODEL_DIR
    registry: Path | None = Field(
        default=None,
        description=(
            "folder of model versions (one sub-folder each); when set, the worker serves the version "
            "named in its ACTIVE file (else the highest semver) and hot-swaps when that changes"
        ),
    )
    registry_poll_s: float = Field(
        default=2.0, gt=0, le=3600, description="how often the registry is checked"
    )
    # "auto" = TensorRT/CUDA when the runtime offers them, else CPU.
    provider: str = "auto"
    device_id: int = Field(default=0, ge=0)
    # Explicit threads: ONNX Runtime's default (one per core, busy-spinning) starves Kafka and
    # Redis on a small machine.
    intra_op_threads: int = Field(default=1, ge=0)
    allow_spinning: bool = False
    warmup_rows: int = Field(
        default=64, ge=0, le=100_000, description="rows of the warm-up inference at load"
    )
    top_k: int | None = Field(
        default=None, ge=1, le=32, description="candidates per answer (unset: the fleet spec's)"
    )


class WorkerOptions(Section):
    group_id: str = "precast-workers"
    model_memory_mb: int | None = Field(
        default=None,
        ge=1,
        description="refuse to load a model whose session adds more resident memory than this "
        "at load (measured, one line naming both figures); unset: no limit",
    )
    batch_max: int = Field(default=2_000, ge=1, le=100_000)
    max_queue_delay_ms: float = Field(
        default=0.0,
        ge=0,
        le=10_000,
        description=(
            "a batch closes when its oldest trigger has waited this long, or at batch_max "
            "(0: natural batching, a batch is what arrived while the previous one ran)"
        ),
    )
    preferred_batch_sizes: tuple[int, ...] = Field(
        default=(),
        description=(
            "JSON list; a batch also closes as soon as one of these sizes is reached (e.g. for TensorRT profiles)"
        ),
    )
    consume_max: int = Field(
        default=5_000, ge=1, le=100_000, description="records per consume() call"
    )
    linger_ms: float = Field(
        default=0.0,
        ge=0,
        le=1_000,
        description=(
            "linger.ms of the predictions producer: each ms adds to an answer's freshness; "
            "with 0 a batch still leaves in one request (its records are queued together)"
        ),
    )
    poll_timeout_s: float = Field(default=0.1, gt=0, le=10)
    request_wait_s: float = Field(
        default=30.0,
        ge=0,
        le=3_600,
        description=(
            "how long a precompute request for a device without data waits for that data "
            "(a failover reading a backlog, heartbeats behind the request); 0 drops it at once"
        ),
    )
    request_wait_max: int = Field(
        default=10_000, ge=0, le=1_000_000, description="devices whose requests wait at once"
    )
    horizon_s: float | None = Field(
        default=None,
        gt=0,
        le=86_400,
        description="validity of an answer after its data's time (unset: the fleet spec's)",
    )
    commit_interval_ms: int = Field(
        default=200,
        ge=1,
        le=60_000,
        description=(
            "how often outputs are flushed and input offsets committed (or the transaction committed)"
        ),
    )
    exactly_once: bool = Field(
        default=False, description="Kafka transactions instead of at-least-once"
    )
    transaction_timeout_ms: int = Field(
        default=10_000,
        ge=1_000,
        le=900_000,
        description=(
            "exactly-once: how long a dead worker's open transaction blocks its partitions"
        ),
    )
    renewal: Literal["lease", "whole"] = Field(
        default="lease",
        description=(
            "how stable answers stay valid: lease = one validity lease per partition and interval "
            "(docs/workers.md); whole = every answer near expiry published again (the older way)"
        ),
    )
    lease_interval_ms: int = Field(
        default=1_000,
        ge=100,
        le=600_000,
        description="one validity lease per partition this often (must fit in the horizon)",
    )
    lease_max_extension_s: float = Field(
        default=900.0,
        gt=0,
        le=86_400,
        description=(
            "no lease extends an answer longer than this after its data time: a quiet device is "
            "republished once per this long"
        ),
    )
    instance_id: str = Field(
        default="",
        description=(
            "stable member name for the transactional.id (default host-pid); a restart with the same id "
            "aborts the open transaction of its previous incarnation at once"
        ),
    )


class PolicyOptions(Section):
    min_change: float = Field(
        default=0.05,
        ge=0,
        description=("material heartbeat change: max over features of abs(delta) / scale"),
    )
    refresh_lead_ms: int = Field(
        default=1_000, ge=0, description="refresh this long before valid_until"
    )
    throttle_ms: int = Field(
        default=250, ge=0, description="at most one prediction per device per this long"
    )
    safety: float = Field(
        default=0.5,
        gt=0,
        le=1_000,
        description="cold devices predict when the estimated top-1 gap is within this x its uncertainty",
    )
    hot_safety: float = Field(
        default=2.0,
        gt=0,
        le=1_000,
        description="the same for hot devices (read, prefetched or watched recently)",
    )
    max_change: float = Field(
        default=1.0,
        gt=0,
        description="a move this large (in change-scale units) predicts whatever the bound says",
    )
    every_event: bool = Field(
        default=False, description="predict on every fresh heartbeat (the baseline, no skipping)"
    )


class WorkerSettings(CommonSettings):
    worker: WorkerOptions = WorkerOptions()
    model: ModelOptions = ModelOptions()
    policy: PolicyOptions = PolicyOptions()


class ContextOptions(Section):
    app_id: str = Field(
        default="precast-context",
        description=("faust app id: the consumer group and the prefix of its changelog topic"),
    )
    commit_interval_s: float = Field(
        default=1.0, gt=0, le=60, description="how often faust commits offsets"
    )
    session_timeout_s: float = Field(
        default=10.0,
        ge=6,
        le=300,
        description=("how long a dead instance keeps its partitions (faust's default is 60 s)"),
    )
    data_dir: Path = Field(
        default=Path(".precast/context"), description="faust's local data folder"
    )


class ContextSettings(CommonSettings):
    """`precast-context`: the per-device context aggregator (faust)."""

    context: ContextOptions = ContextOptions()


class DriftOptions(Section):
    group_id: str = Field(
        default="precast-drift",
        description="consumer group of the drift monitor (reads heartbeats from the newest offset)",
    )
    model_path: Path = Field(
        default=DEFAULT_MODEL_DIR,
        description="model folder whose drift-reference.npz the live features are compared with",
    )
    window_s: float = Field(
        default=30.0, gt=0, le=3600, description="sliding window of live heartbeats, seconds"
    )
    step_s: float = Field(default=5.0, gt=0, le=600, description="one test per this long")
    min_rows: int = Field(
        default=500, ge=20, le=1_000_000, description="windows with fewer rows are not tested"
    )
    max_rows: int = Field(
        default=100_000, ge=100, le=10_000_000, description="newest rows kept in the window"
    )
    alpha: float = Field(
        default=0.01, gt=0, lt=1, description="Benjamini-Hochberg false discovery rate"
    )
    # Above what an unshifted fleet shows: fleet composition (~2/sqrt(devices) for the
    # device-type shares) and telemetry rounding reach D ~ 0.035 for 2,000 devices (bench drift).
    min_effect: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="a feature is flagged only if its KS distance D also exceeds this",
    )
    consume_max: int = Field(default=5_000, ge=1, le=100_000)
    poll_timeout_s: float = Field(default=0.5, gt=0, le=10)


class DriftSettings(CommonSettings):
    """`precast-drift`: the feature drift monitor (a side consumer, off the hot path)."""

    drift: DriftOptions = DriftOptions()
