"""Settings of a worker process (built once, in `workers.cli`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from precast.settings import CommonSettings, Section

DEFAULT_MODEL_DIR = Path(__file__).parent / "models" / "fleet-strategy" / "1.0.0"


class ModelOptions(Section):
    # A folder holding model.onnx and manifest.json (see docs/models.md to bring your own).
    path: Path = DEFAULT_MODEL_DIR
    # "auto" = TensorRT/CUDA when the runtime offers them, else CPU.
    provider: str = "auto"
    device_id: int = Field(default=0, ge=0)
    # Explicit threads: ONNX Runtime's default (one per core, busy-spinning) starves Kafka and
    # Redis on a small machine.
    intra_op_threads: int = Field(default=1, ge=0)
    allow_spinning: bool = False
    top_k: int = Field(default=3, ge=1, le=32)


class WorkerOptions(Section):
    group_id: str = "precast-workers"
    batch_max: int = Field(default=2_000, ge=1, le=100_000)
    poll_timeout_s: float = Field(default=0.1, gt=0, le=10)
    horizon_s: float = Field(default=5.0, gt=0, le=86_400)


class WorkerSettings(CommonSettings):
    worker: WorkerOptions = WorkerOptions()
    model: ModelOptions = ModelOptions()
