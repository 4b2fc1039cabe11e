"""Settings of a read-API process (built once, in `consumer_api.cli`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator

from precast.settings import CommonSettings, Section
from schemas.fleet import DEFAULT_STRATEGY, STRATEGIES


class ApiOptions(Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    server: Literal["granian", "uvicorn"] = Field(
        default="granian",
        description="HTTP server running the app in this process (docs/dependencies.md)",
    )
    group_id: str = Field(
        default="precast-api", description="prefix of each replica's own consumer group"
    )
    ready_max_lag: int = Field(
        default=0,
        ge=0,
        description="ready once the predictions topic is read up to this many records of the end seen at start",
    )
    grace_s: float = Field(
        default=30.0,
        ge=0,
        le=86_400,
        description="entries stay this long after valid_until (served per `expired`), then expire",
    )
    expired: Literal["stale", "fallback"] = Field(
        default="stale",
        description="past valid_until: serve the entry marked stale, or the fallback",
    )
    default_strategy: str = Field(
        default=DEFAULT_STRATEGY, description="the fallback answer's strategy"
    )
    local_view: bool = Field(
        default=True,
        description=(
            "serve reads from an in-process view (fed by this replica's "
            "materializer); false = one Redis GET per read"
        ),
    )
    batch_max: int = Field(
        default=100, ge=1, le=10_000, description="most devices in one batch GET or prefetch hint"
    )
    sse_max_devices: int = Field(
        default=200, ge=1, le=10_000, description="most devices one event stream may watch"
    )
    sse_max_streams: int = Field(
        default=1_000,
        ge=1,
        le=100_000,
        description="most open event streams per replica; past it a new stream gets 503 and Retry-After",
    )
    sse_keepalive_s: float = Field(
        default=15.0, gt=0, le=300, description="comment line sent on idle event streams"
    )
    hint_interval_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="how often the devices read, prefetched or watched are sent to the workers (read hints)",
    )
    hot_for_s: float = Field(
        default=30.0,
        ge=0,
        le=3_600,
        description="a read, prefetch or open stream keeps a device hot for the speculation policy this long",
    )
    request_window_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="at most one precompute request per device per window (miss, expiry, prefetch)",
    )
    auth_token: SecretStr | None = Field(
        default=None, description="when set, /v1/* needs `Authorization: Bearer <token>`"
    )
    consume_batch: int = Field(
        default=5_000, ge=1, le=100_000, description="records per materializer poll"
    )
    max_body_bytes: int = Field(
        default=65_536, ge=1024, le=10_485_760, description="largest accepted POST body"
    )

    @field_validator("default_strategy")
    @classmethod
    def _known_strategy(cls, v: str) -> str:
        if v not in STRATEGIES:
            raise ValueError(f"must be one of {', '.join(STRATEGIES)}")
        return v


class ApiSettings(CommonSettings):
    api: ApiOptions = ApiOptions()
