"""What the workers publish and the read API serves, and how workers are asked to compute."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.events import DeviceId, EpochMs, EventId
from schemas.leases import LeaseTerms


class Candidate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    strategy: str
    score: float = Field(ge=0, le=1)


class LineageRef(BaseModel):
    """One input record a prediction was computed from: a trigger, or (`state: true`) the
    heartbeat the device's state came from when something else asked for the prediction (a
    work order, an alarm, a request), e.g. after a restart."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str
    partition: int
    offset: int
    event_id: str | None = None
    trace_id: str | None = None
    state: bool = False


Trigger = Literal[
    "heartbeat", "work_order", "alarm", "api_miss", "prefetch", "backfill", "expiry", "purge"
]


class PredictionSet(BaseModel):
    """Top-K service strategies for one device.

    `computed_at_ms` is the event time of the newest input it was computed from (not the wall
    clock), so "newest" means newest data; ties are broken by live before backfill, then
    `produced_at_ms`, then `model_version` (`order_key`, docs/architecture.md).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    device_id: DeviceId
    candidates: list[Candidate]
    model_version: str
    computed_at_ms: EpochMs
    valid_until_ms: EpochMs
    produced_at_ms: EpochMs
    trigger: Trigger
    lineage: list[LineageRef] = Field(default_factory=list)
    # True: computed by a backfill, and ranked below a live answer computed from the same data
    # (see `order_key`); a backfill run with --outrank-live writes false.
    backfill: bool = False
    # Model time of the batch this prediction came from, when the worker reports it; lets the
    # read API split "event -> produced" into queue and model delay (docs/api.md).
    inference_ms: int | None = Field(default=None, ge=0)
    # May be extended by the validity leases of its partition (schemas.leases); absent: valid
    # until `valid_until_ms` only (purge markers, backfills, a device that stopped sending).
    lease: LeaseTerms | None = None


PrecomputeReason = Literal["api_miss", "prefetch", "backfill", "expiry"]


class PrecomputeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    request_id: EventId
    device_id: DeviceId
    reason: PrecomputeReason
    requested_at_ms: EpochMs
    model_version: str | None = None


OrderKey = tuple[int, int, int, str]

# Rank of an answer among answers computed from the same data (equal computed_at_ms): a
# backfill ranks below a live answer, so warming a new model over recent events never replaces
# what the live workers serve unless the operator asks (`precast backfill --outrank-live`,
# which writes `backfill: false`). docs/architecture.md, "Contracts".
BACKFILL_RANK, LIVE_RANK = 0, 1


def order_key(
    computed_at_ms: int, produced_at_ms: int, model_version: str, backfill: bool = False
) -> OrderKey:
    """The newest-wins ordering of docs/architecture.md: data time, then live before backfill,
    then production time, then model version (string order), so every store and every replica
    resolves ties the same way."""
    return (
        computed_at_ms,
        BACKFILL_RANK if backfill else LIVE_RANK,
        produced_at_ms,
        model_version,
    )


def supersedes(new: OrderKey, current: OrderKey | None) -> bool:
    """True when a prediction with order key `new` must replace the one stored with `current`.

    Strictly newer only: a duplicate (equal key) never rewrites, so redelivery is idempotent."""
    return current is None or new > current
