"""What the pipeline's parts share (`PipelineState`), handed to each part at construction: no
part reaches into another's attributes, and a value followed into the pipeline ends here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from precast.fleet import Fleet
from precast.fleet.features import Standardization
from workers.model.sensitivity import Sensitivity
from workers.precompute import metrics
from workers.precompute.config import PipelineConfig
from workers.precompute.items import Reason
from workers.precompute.state.device_table import DeviceTable


def count_decision(reason: Reason, n: int) -> None:
    metrics.DECISIONS.labels(reason.label).inc(n)


@dataclass
class PipelineState:
    """`cfg` is read through here by every part, so a bounded run (backfill, shadow) that
    swaps it changes the whole pipeline at once. `stats` and `sensitivity` are what priming
    the serving model measured (`Scorer.prime` writes them, the heartbeat policy reads them);
    `positions` is the next offset consumed per (topic, partition)."""

    cfg: PipelineConfig
    fleet: Fleet
    table: DeviceTable
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    # the serving model's fitted statistics of standardized features (from its manifest)
    stats: Standardization | None = None
    # its score sensitivities (workers.model.sensitivity), estimated once per version; None
    # until a model has been used (the policy then falls back to the material-change rule)
    sensitivity: Sensitivity | None = None
    model_version: str | None = None  # whose `stats` and `sensitivity` these are
    decisions: Callable[[Reason, int], None] = count_decision  # each policy decision, counted
