"""Grafana dashboards as code (grafana-foundation-sdk builders), one per service plus the SLOs,
speculation and drift. `precast observe generate` writes them to deploy/grafana/dashboards/,
which Grafana's file provisioning loads (deploy/grafana/provisioning/).

Every query uses fixed windows (no Grafana variables), so the integration test can evaluate
the exact PromQL against a live Prometheus and fail on an error or an empty answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders.dashboard import Dashboard, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.builders.stat import Panel as Stat
from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

from opsctl.observe.slo import SLOS

# The datasource uid provisioned in deploy/grafana/provisioning/datasources/prometheus.yml.
DATASOURCE = DataSourceRef(type_val="prometheus", uid="precast-prometheus")
W = "1m"  # rate window: 12 scrapes at the stack's 5 s interval


@dataclass(frozen=True)
class P:
    """One panel: a title, its queries (expr, legend) and a unit (Grafana unit ids)."""

    title: str
    queries: tuple[tuple[str, str], ...]
    unit: str = "short"
    stat: bool = False
    description: str = ""


def q(expr: str, legend: str = "") -> tuple[str, str]:
    return (expr, legend)


def _p99(metric: str, job: str = "") -> str:
    sel = f'{{job="{job}"}}' if job else ""
    return f"histogram_quantile(0.99, sum by (le) (rate({metric}_bucket{sel}[{W}])))"


def _cpu(job: str) -> tuple[tuple[str, str], ...]:
    return (q(f'rate(process_cpu_seconds_total{{job="{job}"}}[{W}])', "{{instance}}"),)


SECTIONS: dict[str, tuple[str, dict[str, list[P]]]] = {
    "precast-worker": (
        "precast / worker",
        {
            "Rate": [
                P(
                    "Records consumed by topic",
                    (q(f"sum by (topic) (rate(precast_worker_events_total[{W}]))", "{{topic}}"),),
                    "reqps",
                ),
                P(
                    "Predictions produced",
                    (
                        q(
                            f"sum by (model_version) (rate(precast_worker_predictions_total[{W}]))",
                            "{{model_version}}",
                        ),
                    ),
                    "reqps",
                ),
            ],
            "Errors": [
                P(
                    "Dead letters by reason",
                    (
                        q(
                            f"sum by (component, reason) (rate(precast_dead_letters_total[{W}]))",
                            "{{component}} {{reason}}",
                        ),
                    ),
                    "reqps",
                ),
                P(
                    "Model failures",
                    (
                        q(
                            "sum by (model_version) "
                            f"(rate(precast_worker_model_failures_total[{W}]))",
                            "{{model_version}}",
                        ),
                    ),
                    "reqps",
                ),
            ],
            "Duration": [
                P(
                    "Event to prediction, p50 / p99",
                    (
                        q(
                            "histogram_quantile(0.5, sum by (le) (rate("
                            f"precast_worker_event_to_prediction_seconds_bucket[{W}])))",
                            "p50",
                        ),
                        q(_p99("precast_worker_event_to_prediction_seconds"), "p99"),
                    ),
                    "s",
                ),
                P(
                    "Inference and queue delay, p99",
                    (
                        q(_p99("precast_worker_inference_seconds"), "inference"),
                        q(_p99("precast_worker_queue_delay_seconds"), "queue delay"),
                    ),
                    "s",
                ),
            ],
            "Saturation": [
                P(
                    "Consumer lag by topic",
                    (q("sum by (topic) (precast_worker_consumer_lag)", "{{topic}}"),),
                    "short",
                ),
                P(
                    "Busy time by loop stage (1 = one core)",
                    (
                        q(
                            f"sum by (stage) (rate(precast_worker_stage_seconds_total[{W}]))",
                            "{{stage}}",
                        ),
                    ),
                    "percentunit",
                ),
                P(
                    "Devices waiting for a prediction",
                    (q("sum(precast_worker_pending_devices)", "pending"),),
                ),
                P(
                    "Mean batch size",
                    (
                        q(
                            f"sum(rate(precast_worker_batch_size_sum[{W}])) / "
                            f"sum(rate(precast_worker_batch_size_count[{W}]))",
                            "devices/batch",
                        ),
                    ),
                ),
                P("Worker CPU", _cpu("precast-worker"), "percentunit"),
            ],
        },
    ),
    "precast-api": (
        "precast / read API",
        {
            "Rate": [
                P(
                    "Reads by source",
                    (q(f"sum by (source) (rate(precast_api_reads_total[{W}]))", "{{source}}"),),
                    "reqps",
                ),
                P(
                    "Predictions materialized",
                    (
                        q(
                            f"sum by (result) (rate(precast_api_materialized_total[{W}]))",
                            "{{result}}",
                        ),
                    ),
                    "reqps",
                ),
            ],
            "Errors": [
                P(
                    "Fallback share of reads",
                    (
                        q(
                            f'sum(rate(precast_api_reads_total{{source="fallback"}}[{W}])) / '
                            f"sum(rate(precast_api_reads_total[{W}]))",
                            "fallback",
                        ),
                    ),
                    "percentunit",
                ),
                P(
                    "Replicas that can write Redis",
                    (q("min(precast_api_redis_up)", "redis up (min over replicas)"),),
                    stat=True,
                ),
            ],
            "Duration": [
                P(
                    "/metrics response time (event-loop responsiveness)",
                    (q('scrape_duration_seconds{job="precast-api"}', "{{instance}}"),),
                    "s",
                    description="The API exports no per-read histogram (a lock per read "
                    "measured as several percent of a read); the scrape is an HTTP request on "
                    "the same event loop. Read latency itself: `python -m bench api`.",
                ),
            ],
            "Saturation": [
                P(
                    "Materializer lag (records)",
                    (q("max(precast_api_materializer_lag)", "lag"),),
                ),
                P("Devices in view", (q("sum(precast_api_devices)", "devices"),)),
                P("Open event streams", (q("sum(precast_api_event_streams)", "streams"),)),
                P("API CPU", _cpu("precast-api"), "percentunit"),
            ],
        },
    ),
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
                        q(f"sum(rate(precast_worker_predictions_total[{W}]))", "inferences"),
                        q(f"sum(rate(precast_worker_events_total[{W}]))", "records"),
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


def _slo_panels() -> dict[str, list[P]]:
    rows: dict[str, list[P]] = {}
    for s in SLOS:
        rows[f"{s.title} ({s.objective:.1%})"] = [
            P(
                f"{s.title}: error ratio",
                (q(s.ratio("5m"), "5m"), q(s.ratio("1h"), "1h"), q(s.ratio("6h"), "6h")),
                "percentunit",
                description=s.summary,
            ),
            P(
                f"{s.title}: burn rate (page > 14.4 / 6)",
                (
                    q(f"{s.ratio('1h')} / {s.budget:g}", "1h"),
                    q(f"{s.ratio('6h')} / {s.budget:g}", "6h"),
                ),
            ),
            P(
                f"{s.title}: budget left over 3 d",
                (q(f"1 - {s.ratio('3d')} / {s.budget:g}", "left"),),
                "percentunit",
                stat=True,
            ),
        ]
    rows["Alerts"] = [
        P(
            "Alerts firing",
            (q('count(ALERTS{alertstate="firing"}) or vector(0)', "firing"),),
            stat=True,
        )
    ]
    return rows


def _panel(p: P) -> Stat | Timeseries:
    b = (Stat() if p.stat else Timeseries()).title(p.title).unit(p.unit).datasource(DATASOURCE)
    b = b.height(8).span(12)  # two per line: the builder's auto-layout wraps at 24 columns
    if p.description:
        b = b.description(p.description)
    for i, (expr, legend) in enumerate(p.queries):
        b = b.with_target(
            Dataquery().expr(expr).legend_format(legend or "__auto").ref_id(chr(ord("A") + i))
        )
    return b


def _dashboard(uid: str, title: str, rows: dict[str, list[P]]) -> dict[str, Any]:
    d = (
        Dashboard(title)
        .uid(uid)
        .tags(["precast", "generated"])
        .refresh("10s")
        .time("now-30m", "now")
        .timezone("browser")
        .readonly()
    )
    for row, panels in rows.items():
        d = d.with_row(Row(row))
        for p in panels:
            d = d.with_panel(_panel(p))
    return json.loads(json.dumps(d.build(), cls=JSONEncoder))


def dashboards() -> dict[str, dict[str, Any]]:
    out = {uid: _dashboard(uid, title, rows) for uid, (title, rows) in SECTIONS.items()}
    out["precast-slo"] = _dashboard("precast-slo", "precast / SLOs", _slo_panels())
    return out


def panel_queries(model: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query in a dashboard model."""
    return [
        (p["title"], t["expr"])
        for p in model.get("panels", [])
        for t in p.get("targets", [])
        if "expr" in t
    ]
