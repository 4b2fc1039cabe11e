"""Read hints: the read API tells the workers which devices somebody reads or watches, so the
speculation policy holds those to its stricter check (docs/workers.md). Keyed by device ID on the
read-hints topic (co-partitioned with the events); a hint is advice, never a trigger: a worker
without state for the device ignores it, and losing one costs only a little precision."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.events import DeviceId

HINT_SCHEMA_VERSION: Literal[1] = 1
HintSource = Literal["read", "prefetch", "stream"]


class ReadHint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = HINT_SCHEMA_VERSION
    device_id: DeviceId
    source: HintSource = Field(
        description="what made the device hot: a read, a prefetch hint, an open event stream"
    )
    hinted_at_ms: int = Field(ge=0, description="API clock when the hint was sent")
    hot_until_ms: int = Field(ge=0, description="the device counts as hot until then (API clock)")
