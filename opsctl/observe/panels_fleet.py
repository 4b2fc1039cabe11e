"""Dashboards of the data around the precompute path: ingest, Redis, speculation, drift."""

from __future__ import annotations

from opsctl.observe.panels import P, W, q

FLEET: dict[str, tuple[str, dict[str, list[P]]]] = {
    "precast-ingest": (
        "precast / simulator and context",
        {
            "Rate": [
                P(
                    "Simulator records by kind",
                    (
                        q(
                            f"sum by (kind) (rate(precast_simulator_events_total[{W}]))",
                            "{{kind}}",
                        ),
                    ),
                    "reqps",
                ),
                P(
                    "Context events by topic and result",
                    (
                        q(
                            f"sum by (topic, result) (rate(precast_context_events_total[{W}]))",
                            "{{topic}} {{result}}",
                        ),
                    ),
                    "reqps",
                ),
            ],
            "Errors": [
                P(
                    "Producer delivery failures",
                    (
                        q(
                            # Labelled by topic and error code, so no series exists before the
                            # first failure: show 0 rather than "No data".
                            f"sum(rate(precast_producer_delivery_failures_total[{W}])) "
                            "or vector(0)",
                            "failures",
                        ),
                    ),
                    "reqps",
                ),
                P(
                    "Targets down",
                    (q('count(up{job=~"precast-.*"} == 0) or vector(0)', "down"),),
                    stat=True,
                ),
            ],
            "Duration": [
                P(
                    "Producer backpressure (share of time waiting)",
                    (
                        q(
                            f"sum(rate(precast_producer_backpressure_seconds_total[{W}]))",
                            "waiting",
                        ),
                    ),
                    "percentunit",
                ),
            ],
            "Saturation": [
                P("Devices with context", (q("sum(precast_context_devices)", "devices"),)),
                P(
                    "Resident memory by service",
                    (q('process_resident_memory_bytes{job=~"precast-.*"}', "{{job}}"),),
                    "bytes",
                ),
            ],
        },
    ),
    "precast-redis": (
        "precast / Redis",
        {
            "Saturation": [
                P("Memory used", (q("sum(redis_memory_used_bytes)", "used"),), "bytes"),
                P("Connected clients", (q("sum(redis_connected_clients)", "clients"),)),
                P(
                    "Commands",
                    (q(f"sum(rate(redis_commands_processed_total[{W}]))", "commands"),),
                    "ops",
                ),
                P("Redis up (exporter)", (q("min(redis_up)", "up"),), stat=True),
            ],
        },
    ),
    "precast-speculation": (
        "precast / speculation",
        {
            "Inferences vs events": [
                P(
                    "Predictions per consumed record",
                    (
                        q(
                            f"sum(rate(precast_worker_predictions_total[{W}])) / "
                            f"sum(rate(precast_worker_events_total[{W}]))",
                            "predictions / records",
                        ),
                    ),
                    "percentunit",
                    description="Share of consumed records that led to an inference: the "
                    "speculation policy skips what did not change materially.",
                ),
                P(
                    "Policy decisions",
                    (
                        q(
                            f"sum by (reason) (rate(precast_worker_decisions_total[{W}]))",
                            "{{reason}}",
                        ),
                    ),
                    "reqps",
                ),
                P(
                    "Triggers coalesced into a due prediction",
                    (q(f"sum(rate(precast_worker_coalesced_total[{W}]))", "coalesced"),),
                    "reqps",
                ),
                P(
                    "Inferences and records",
                    (
                        q(f"sum(rate(precast_worker_inferences_total[{W}]))", "inferences"),
                        q(f"sum(rate(precast_worker_events_total[{W}]))", "records"),
                    ),
                    "reqps",
                ),
                P(
                    "Records published per inference",
                    (
                        q(
                            f"(sum(rate(precast_worker_predictions_total[{W}])) + "
                            f"sum(rate(precast_worker_leases_total[{W}]))) / "
                            f"sum(rate(precast_worker_inferences_total[{W}]))",
                            "records / inference",
                        ),
                    ),
                    description="Answers, last answers of devices that stopped sending and "
                    "validity leases published per inference: what keeping answers valid costs "
                    "on top of computing them (about 1 with leases; docs/workers.md).",
                ),
                P(
                    "Validity leases",
                    (
                        q(f"sum(rate(precast_worker_leases_total[{W}]))", "published"),
                        q(f"sum(rate(precast_worker_leases_skipped_total[{W}]))", "skipped"),
                        q(f"sum(rate(precast_worker_lease_lapses_total[{W}]))", "lapses"),
                    ),
                    "reqps",
                ),
            ],
        },
    ),
    "precast-drift": (
        "precast / feature drift",
        {
            "Drift": [
                P(
                    "Features flagged",
                    (q("max(precast_drift_flagged_features)", "flagged"),),
                    stat=True,
                ),
                P(
                    "KS distance D by feature",
                    (q("max by (feature) (precast_drift_ks_statistic)", "{{feature}}"),),
                    description="Flagged only when BH rejects and D exceeds the effect floor "
                    "(PRECAST_DRIFT__MIN_EFFECT).",
                ),
                P(
                    "p-value by feature",
                    (q("min by (feature) (precast_drift_p_value)", "{{feature}}"),),
                ),
                P(
                    "Window size",
                    (q("max(precast_drift_window_rows)", "rows"),),
                ),
                P(
                    "Windows tested by result",
                    (
                        q(
                            f"sum by (result) (rate(precast_drift_windows_total[{W}]))",
                            "{{result}}",
                        ),
                    ),
                    "reqps",
                ),
                P(
                    "Feature values tested",
                    (q(f"sum(rate(precast_drift_values_total[{W}]))", "values"),),
                    "ops",
                ),
            ],
        },
    ),
}
