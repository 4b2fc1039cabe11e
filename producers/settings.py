"""Settings of the simulator process (built once, in `producers.cli`)."""

from __future__ import annotations

from pydantic import Field

from precast.settings import CommonSettings, Section


class SimulatorOptions(Section):
    devices: int = Field(default=10_000, ge=1, le=10_000_000)
    # Heartbeats per second for the whole fleet (the global rate limit).
    rate: float = Field(default=5_000.0, gt=0)
    seed: int = 42
    duration_s: float = Field(default=0.0, ge=0, description="0 = no time limit")
    count: int = Field(default=0, ge=0, description="events to send; 0 = no limit")
    bad_rate: float = Field(default=0.0, ge=0, le=1, description="share of malformed records injected")
    progress_every_s: float = Field(default=5.0, gt=0)


class SimulatorSettings(CommonSettings):
    simulator: SimulatorOptions = SimulatorOptions()
