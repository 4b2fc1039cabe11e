"""Settings of a read-API process (built once, in `consumer_api.cli`)."""

from __future__ import annotations

from pydantic import Field

from precast.settings import CommonSettings, Section


class ApiOptions(Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    group_id: str = "precast-api"
    # Ready once the materializer has read the predictions topic up to the end it saw at start.
    ready_max_lag: int = Field(default=0, ge=0)


class ApiSettings(CommonSettings):
    api: ApiOptions = ApiOptions()
