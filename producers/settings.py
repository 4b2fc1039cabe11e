"""Settings of the simulator process (built once, in `producers.cli`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from precast.settings import CommonSettings, Section


class SimulatorOptions(Section):
    devices: int = Field(
        default=10_000, ge=1, le=10_000_000, description="devices in the simulated fleet"
    )
    rate: float = Field(
        default=5_000.0,
        ge=0,
        description="global rate limit, records/s over all topics; 0 = unlimited",
    )
    hb_interval_s: float | None = Field(
        default=None,
        gt=0,
        le=86_400,
        description="simulated seconds between two heartbeats of one device (unset: the fleet "
        "spec's simulator.heartbeat_every_s)",
    )
    speedup: float = Field(
        default=1.0,
        gt=0,
        le=100_000,
        description="simulated time per heartbeat slot x this: alarms, work orders, drift come sooner",
    )
    drift_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="share of devices drifting into a faulty condition (unset: the spec's)",
    )
    drift_s: float | None = Field(
        default=None,
        gt=0,
        description="simulated seconds a drifting device takes to drift (unset: the spec's)",
    )
    profile: Literal["iid", "noisy", "steady"] = Field(
        default="noisy",
        description="heartbeat noise over time: iid (fresh draw each time), noisy, steady (docs/events.md)",
    )
    drift_at_s: float | None = Field(
        default=None,
        ge=0,
        description="every drifting device starts at this simulated second (a fleet-wide "
        "drift event); unset = each at its own moment within drift_s",
    )
    drift_profile: Literal["none", "shift"] = Field(
        default="none",
        description="shift: from drift_profile_at_s on, a share of devices changes condition and "
        "the faults' heartbeat signatures rotate (a stale model goes wrong; docs/events.md)",
    )
    drift_profile_at_s: float = Field(
        default=600.0, ge=0, description="simulated second the drift profile's shift starts at"
    )
    drift_profile_ramp_s: float = Field(
        default=300.0, ge=0, description="simulated seconds over which devices switch, each once"
    )
    drift_profile_mix: float = Field(
        default=0.3,
        ge=0,
        le=1,
        description="share of devices the shift moves into another condition",
    )
    resolutions: bool = Field(
        default=True,
        description="close work orders with the resolution the device's condition calls for "
        "(the fleet spec's [outcomes]); false: closes carry none",
    )
    resolution_wrong_share: float = Field(
        default=0.05, ge=0, le=1, description="share of resolutions naming a wrong label"
    )
    resolution_missing_share: float = Field(
        default=0.1, ge=0, le=1, description="share of closes without a resolution"
    )
    resolution_delay_s: float | None = Field(
        default=None,
        gt=0,
        description="mean simulated seconds a work order stays open before its resolution "
        "(unset: the spec's simulator.streams mean_open_s)",
    )
    seed: int = Field(default=42, description="same seed, same fleet and event sequence")
    run_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9]{1,16}$",
        description="prefix of event ids; random per run unless set (reproducible ids)",
    )
    duration_s: float = Field(default=0.0, ge=0, description="0 = no time limit")
    count: int = Field(default=0, ge=0, description="records to send (good and bad); 0 = no limit")
    bad_rate: float = Field(
        default=0.0, ge=0, le=1, description="share of malformed records injected"
    )
    progress_every_s: float = Field(default=5.0, gt=0)


class SimulatorSettings(CommonSettings):
    simulator: SimulatorOptions = SimulatorOptions()
