"""The panel vocabulary of the dashboards (`P`, `q`, rate window and quantile helpers) and the
dashboards of the precompute side: the worker and the API."""

from __future__ import annotations

from dataclasses import dataclass

W = "1m"  # rate window: 12 scrapes at the stack's 5 s interval


@dataclass(frozen=True)
class P:
    """One panel: a title, its queries (expr, legend) and a unit (Grafana unit ids)."""

    title: str
    queries: tuple[tuple[str, str], ...]
    unit: str = "short"
    stat: bool = False
    description: str = ""
    # Show the histograms' exemplars (trace IDs of single observations): a dot on a slow bucket
    # opens its trace in the tracing datasource (deploy/grafana/provisioning/datasources).
    exemplars: bool = False


def q(expr: str, legend: str = "") -> tuple[str, str]:
    return (expr, legend)


def _p99(metric: str, job: str = "") -> str:
    sel = f'{{job="{job}"}}' if job else ""
    return f"histogram_quantile(0.99, sum by (le) (rate({metric}_bucket{sel}[{W}])))"


def _cpu(job: str) -> tuple[tuple[str, str], ...]:
    return (q(f'rate(process_cpu_seconds_total{{job="{job}"}}[{W}])', "{{instance}}"),)


PRECOMPUTE: dict[str, tuple[str, dict[str, list[P]]]] = {
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
                    description="Each dot is an exemplar: one prediction's batch and its trace "
                    "ID; click a slow one to open its path from the device to the answer.",
                    exemplars=True,
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
                P(
                    "Traced reads, p50 / p99",
                    (
                        q(
                            "histogram_quantile(0.5, sum by (le) (rate("
                            f"precast_api_traced_read_seconds_bucket[{W}])))",
                            "p50",
                        ),
                        q(_p99("precast_api_traced_read_seconds"), "p99"),
                    ),
                    "s",
                    description="Server time of the reads that continued a sampled answer's "
                    "trace (tracing on; empty when off). Each dot is an exemplar: click a slow "
                    "one to open that read in its answer's trace, from the device to the screen.",
                    exemplars=True,
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
}
