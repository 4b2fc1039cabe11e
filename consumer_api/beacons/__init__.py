"""UI timing beacons and the signals aggregated from them per client (the banner, the
measures of precast.telemetry.objectives)."""
