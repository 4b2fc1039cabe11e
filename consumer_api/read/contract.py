"""The read API's response bodies as pydantic models: the OpenAPI document is generated from
them (and from the request models the handlers validate with: `requests_in.Prefetch`,
`beacon.Beacon`). The hot paths render bytes directly (`answers`); tests validate those bytes
against these models, so the document cannot drift from what is served."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.events import DeviceId

Source = Literal["precomputed", "stale", "fallback"]
DelayOrigin = Literal["queue", "model", "kafka", "cache", "fallback"]
FallbackReason = Literal["unknown_device", "expired", "purged", "store_unavailable"]
# (tests/unit/test_api_app.py checks these list exactly what `answers` renders)


class Error(BaseModel):
    """Every 4xx/5xx body: what went wrong, why, and which parameter or field (if one)."""

    error: str = Field(description="a stable code, e.g. invalid_device_id")
    detail: str
    parameter: str | None = Field(default=None, description="the parameter or field at fault")


class Candidate(BaseModel):
    strategy: str
    score: float = Field(ge=0, le=1)


class ExtendedBy(BaseModel):
    """The validity lease (schemas.leases) a quiet device's answer is served under."""

    partition: int = Field(ge=0, description="predictions partition of the lease record")
    offset: int = Field(description="its offset (precast audit prove --partition --offset)")
    generation: int = Field(ge=0, description="the worker generation that published it")
    certified_at_ms: int = Field(
        description="the answer was checked unchanged against device data up to this time"
    )


class Answer(BaseModel):
    """One device's answer. Precomputed and stale answers carry the PredictionSet as the worker
    published it (schemas.predictions; more fields than listed here) plus the serving fields."""

    model_config = ConfigDict(extra="allow")

    device_id: DeviceId
    candidates: list[Candidate]
    model_version: str | None
    computed_at_ms: int | None = Field(
        description="event time of the newest device data the answer was computed from"
    )
    valid_until_ms: int | None = Field(
        description="valid until then: its own validity, or the validity lease's that extended it"
    )
    age_ms: int | None = Field(
        description="now - computed_at_ms; under a validity lease, now - its certified_at_ms"
    )
    extended_by: ExtendedBy | None = Field(
        default=None,
        description="the validity lease that keeps this answer valid past its own validity "
        "(absent otherwise); its audit proof is by partition and offset",
    )
    source: Source
    delay_origin: DelayOrigin = Field(description="the largest segment of the answer's age")
    reason: FallbackReason | None = Field(
        default=None,
        description="fallback only: unknown_device (no entry: never asks the workers), expired, "
        "purged, store_unavailable",
    )


class Batch(BaseModel):
    count: int = Field(ge=0)
    predictions: list[Answer]


class PrefetchResult(BaseModel):
    sent: int = Field(ge=0, description="precompute requests published")
    deduplicated: int = Field(ge=0, description="already asked within the window")
    dropped: int = Field(ge=0, description="could not be sent now (queue full, no producer)")
    over_budget: int = Field(ge=0, description="past the shared precompute budget")
    fresh: int = Field(ge=0, description="already have a fresh answer")
    unknown: int = Field(ge=0, description="no entry in the store: never asked for")
