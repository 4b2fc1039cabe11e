"""The shipped Prometheus rules: promtool accepts them, every metric they name is exported,
and promtool's rule unit tests prove the SLO alerts behave as the SRE workbook says (a fast
burn pages, a slow burn tickets, a 1x burn does not page) and the service alerts fire."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

import auditor.metrics  # noqa: F401  (registers the metrics)
import consumer_api.beacons.beacon  # noqa: F401
import consumer_api.materialize.materializer  # noqa: F401
import consumer_api.read.hub  # noqa: F401
import consumer_api.read.service  # noqa: F401
import precast.deadletter  # noqa: F401
import producers.cli  # noqa: F401
import workers.drift.monitor  # noqa: F401
import workers.model.serving_metrics  # noqa: F401
import workers.precompute.metrics  # noqa: F401
from opsctl.observe.render import stale
from opsctl.observe.slo import SLOS, Slo

ALERTS = Path(__file__).resolve().parents[2] / "deploy" / "alerts"
RULE_FILES = sorted(ALERTS.glob("*.rules.yml"))


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool missing: ./dev setup installs Debian's prometheus package"
    return found


def _rules() -> dict[str, dict[str, Any]]:
    return {
        r.get("alert") or r["record"]: r
        for f in RULE_FILES
        for g in yaml.safe_load(f.read_text())["groups"]
        for r in g["rules"]
    }


def test_promtool_accepts_every_rule_file():
    out = subprocess.run(
        [promtool(), "check", "rules", *map(str, RULE_FILES)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert len(RULE_FILES) >= 3


def test_generated_rules_and_dashboards_are_up_to_date():
    assert not stale(), "run: precast observe generate"


def test_rules_use_exported_metrics():
    rules = _rules()
    exported = set()
    for m in REGISTRY.collect():  # families, with or without samples yet (labelled ones)
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
        exported |= {m.name + s for s in suffixes.get(m.type, ("",))}
    for name, r in rules.items():
        for metric in set(re.findall(r"\bprecast_[a-z0-9_]+", r["expr"])):
            assert metric in exported, f"{name}: {metric} is not exported"


def test_every_alert_has_a_severity_and_a_runbook_section():
    doc = (ALERTS.parents[1] / "docs" / "observability.md").read_text()
    for name, r in _rules().items():
        if "alert" not in r:
            continue
        assert r["labels"]["severity"] in {"page", "ticket", "warning", "critical"}, name
        assert f"### {name}" in doc, f"docs/observability.md has no section for {name}"


# -- promtool rule unit tests ---------------------------------------------------------------------
PER_MIN = 6_000  # events per minute in the synthetic series


def _counter(rate_per_min: Sequence[tuple[float, int]]) -> str:
    """Expanding notation of a counter growing by r per minute for n minutes, segment by segment."""
    parts, value = [], 0.0
    for r, n in rate_per_min:
        parts.append(f"{value:g}+{r:g}x{n}")
        value += r * (n + 1)
    return " ".join(parts)


def _series(slo: Slo, phases: list[tuple[float, int]]) -> list[dict[str, str]]:
    """Input series for an SLO: phases of (error ratio, minutes)."""
    bad = [(PER_MIN * e, n) for e, n in phases]
    good = [(PER_MIN * (1 - e), n) for e, n in phases]
    total = [(PER_MIN, n) for _, n in phases]
    if slo.name == "freshness":
        m = "precast_worker_event_to_prediction_seconds"
        return [
            {"series": f'{m}_bucket{{le="1.0"}}', "values": _counter(good)},
            {"series": f"{m}_count", "values": _counter(total)},
        ]
    if slo.name == "hit_ratio":
        return _reads(bad, good, [(0, n) for _, n in phases])
    # Availability from `up`: an error ratio e is e x R replicas down out of R, R the smallest
    # fleet where that is a whole number. Samples every 5 m here (see _interval).
    partial = [e for e, _ in phases if 0 < e < 1]
    replicas = round(1 / min(partial)) if partial else 1
    out = []
    for i in range(replicas):
        vals = " ".join(f"{0 if i < round(e * replicas) else 1}x{n // 5}" for e, n in phases)
        out.append({"series": f'up{{job="precast-api",instance="r{i}"}}', "values": vals})
    return out


def _reads(
    expired: list[tuple[float, int]],
    precomputed: list[tuple[float, int]],
    unknown: list[tuple[float, int]],
) -> list[dict[str, str]]:
    """The read API's counters for phases of (per-minute rate, minutes): fallbacks of devices
    that had an answer (expired), reads answered from a prediction, reads of unknown devices."""
    fallback = [(e + u, n) for (e, n), (u, _) in zip(expired, unknown, strict=True)]
    m, f = "precast_api_reads_total", "precast_api_fallbacks_total"
    zero = [(0.0, n) for _, n in expired]
    return [
        {"series": f'{m}{{source="fallback"}}', "values": _counter(fallback)},
        {"series": f'{m}{{source="precomputed"}}', "values": _counter(precomputed)},
        {"series": f'{f}{{reason="expired"}}', "values": _counter(expired)},
        {"series": f'{f}{{reason="unknown_device"}}', "values": _counter(unknown)},
        {"series": f'{f}{{reason="purged"}}', "values": _counter(zero)},
        {"series": f'{f}{{reason="store_unavailable"}}', "values": _counter(zero)},
    ]


QUIET = (
    "PrecastHitRatioBudgetBurnFast",
    "PrecastHitRatioBudgetBurnSlow",
    "PrecastFallbackAnswers",
    "PrecastUnknownDeviceReads",
    "PrecastFreshnessBudgetBurnFast",
    "PrecastFreshnessBudgetBurnSlow",
)


def test_a_healthy_start_stays_quiet_from_the_first_minute(tmp_path):
    """The shape of a fresh demo: for 3 minutes every read finds no answer yet (the board is
    open before the first predictions), then answers arrive and all is well; the workers'
    first predictions are few. Nothing may fire or even be pending at any minute of it
    (issue 39; the demo's own test checks the real thing)."""
    reads = _reads(
        expired=[(0.0, 3), (0.0, 27)],
        precomputed=[(0.0, 3), (600.0, 27)],
        unknown=[(600.0, 3), (6.0, 27)],
    )
    m = "precast_worker_event_to_prediction_seconds"
    fresh = [
        {"series": f'{m}_bucket{{le="1.0"}}', "values": _counter([(39, 2), (2_990, 28)])},
        {"series": f"{m}_count", "values": _counter([(40, 2), (3_000, 28)])},
    ]
    _run_promtool(
        tmp_path,
        [
            {
                "interval": "1m",
                "input_series": reads + fresh,
                "alert_rule_test": [
                    {"eval_time": f"{t}m", "alertname": name, "exp_alerts": []}
                    for t in (1, 2, 3, 4, 5, 8, 12, 20, 29)
                    for name in QUIET
                ],
            }
        ],
    )


def test_a_store_that_lost_its_data_is_still_noticed(tmp_path):
    """What the start-up rule leaves out cannot hide an outage: reads of devices that had
    answers turning into reads of unknown devices (a flushed Redis) fire the unknown-device
    alert, and expirations still burn the hit-ratio budget."""
    reads = _reads(
        expired=[(0.0, 60), (300.0, 60)],
        precomputed=[(600.0, 60), (300.0, 60)],
        unknown=[(0.0, 30), (600.0, 90)],
    )
    _run_promtool(
        tmp_path,
        [
            {
                "interval": "1m",
                "input_series": reads,
                "alert_rule_test": [
                    {
                        "eval_time": "29m",
                        "alertname": "PrecastUnknownDeviceReads",
                        "exp_alerts": [],
                    },
                    {
                        "eval_time": "80m",
                        "alertname": "PrecastUnknownDeviceReads",
                        "exp_alerts": [{"exp_labels": {"severity": "warning"}}],
                    },
                    {
                        "eval_time": "70m",
                        "alertname": "PrecastHitRatioBudgetBurnFast",
                        "exp_alerts": [{"exp_labels": {"severity": "page", "slo": "hit_ratio"}}],
                    },
                ],
            }
        ],
    )


def test_a_handful_of_events_pages_nobody(tmp_path):
    """Below 100 events in the long window a burn is no evidence: 10 reads a minute, half of
    them expired, for 4 minutes (about 50 reads) pages nobody."""
    reads = _reads(
        expired=[(5.0, 4), (0.0, 6)],
        precomputed=[(5.0, 4), (0.0, 6)],
        unknown=[(0.0, 4), (0.0, 6)],
    )
    _run_promtool(
        tmp_path,
        [
            {
                "interval": "1m",
                "input_series": reads,
                "alert_rule_test": [
                    {
                        "eval_time": f"{t}m",
                        "alertname": "PrecastHitRatioBudgetBurnFast",
                        "exp_alerts": [],
                    }
                    for t in (2, 4, 6, 9)
                ],
            }
        ],
    )


def _interval(slo: Slo) -> str:
    # rate() needs two samples in its shortest (5 m) window; avg_over_time(up) needs one, and a
    # coarser step keeps a 1,000-replica fleet over 7 hours quick to evaluate.
    return "5m" if slo.name == "api_availability" else "1m"


def _alert(slo: Slo, severity: str) -> dict[str, Any]:
    return {"severity": severity, "slo": slo.name}


def _without_annotations(tmp_path: Path) -> list[str]:
    """Copies of the rule files without annotations: promtool compares rendered annotations
    exactly, and what is under test here is each rule's expression, `for` and labels
    (`promtool check rules` above checks that the annotation templates parse)."""
    out = []
    for f in RULE_FILES:
        doc = yaml.safe_load(f.read_text())
        for g in doc["groups"]:
            for r in g["rules"]:
                r.pop("annotations", None)
        copy = tmp_path / f.name
        copy.write_text(yaml.safe_dump(doc, sort_keys=False))
        out.append(str(copy))
    return out


def _run_promtool(tmp_path: Path, tests: list[dict[str, Any]], interval: str = "1m") -> None:
    doc = {
        "rule_files": _without_annotations(tmp_path),
        "evaluation_interval": interval,
        "tests": tests,
    }
    path = tmp_path / "rules.test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = subprocess.run(
        [promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]


@pytest.mark.parametrize("slo", SLOS, ids=lambda s: s.name)
def test_fast_burn_pages_within_minutes_and_not_before(slo, tmp_path):
    # An hour healthy, then every event bad (an outage): at least 100x any of our budgets.
    series = _series(slo, [(0.0, 60), (1.0, 30)])
    page = slo.alert_name("page")
    _run_promtool(
        tmp_path,
        [
            {
                "interval": _interval(slo),
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "55m", "alertname": page, "exp_alerts": []},
                    {
                        "eval_time": "75m",
                        "alertname": page,
                        "exp_alerts": [{"exp_labels": _alert(slo, "page")}],
                    },
                ],
            }
        ],
        _interval(slo),
    )


@pytest.mark.parametrize("slo", SLOS, ids=lambda s: s.name)
def test_slow_burn_tickets_without_paging(slo, tmp_path):
    series = _series(slo, [(2 * slo.budget, 420)])  # 2x for 7 hours
    page, ticket = slo.alert_name("page"), slo.alert_name("ticket")
    _run_promtool(
        tmp_path,
        [
            {
                "interval": _interval(slo),
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "1h", "alertname": page, "exp_alerts": []},
                    {"eval_time": "6h", "alertname": page, "exp_alerts": []},
                    {
                        "eval_time": "6h",
                        "alertname": ticket,
                        "exp_alerts": [{"exp_labels": _alert(slo, "ticket")}],
                    },
                ],
            }
        ],
        _interval(slo),
    )


@pytest.mark.parametrize("slo", SLOS, ids=lambda s: s.name)
def test_a_1x_burn_never_pages(slo, tmp_path):
    series = _series(slo, [(slo.budget, 420)])  # spending exactly the budget's pace
    page = slo.alert_name("page")
    _run_promtool(
        tmp_path,
        [
            {
                "interval": _interval(slo),
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": t, "alertname": page, "exp_alerts": []}
                    for t in ("10m", "1h", "3h", "6h", "7h")
                ],
            }
        ],
        _interval(slo),
    )


def test_service_alerts_fire_on_their_conditions(tmp_path):
    lag = [
        {"series": 'precast_worker_consumer_lag{topic="hb",partition="0"}', "values": "80000x30"},
        {"series": 'precast_worker_consumer_lag{topic="hb",partition="1"}', "values": "0x30"},
    ]
    other = [
        {
            "series": 'precast_dead_letters_total{component="worker",reason="bad_json"}',
            "values": _counter([(300, 30)]),
        },
        {
            "series": 'precast_worker_model_failures_total{model_version="1.0.0"}',
            "values": "0x10 1+1x5 6x15",
        },
        {"series": "precast_drift_flagged_features", "values": "0x5 2x25"},
        {"series": 'precast_drift_windows_total{result="clean"}', "values": "0x30"},
        {"series": 'up{job="precast-worker",instance="w1"}', "values": "1x10 0x20"},
        # Checkpoints every minute for 10 minutes, then none (the series stays at its last value).
        {
            "series": "precast_audit_last_checkpoint_timestamp_seconds",
            "values": "0+60x10 600x20",
        },
    ]
    _run_promtool(
        tmp_path,
        [
            {
                "interval": "1m",
                "input_series": lag + other,
                "alert_rule_test": [
                    {
                        "eval_time": "10m",
                        "alertname": "PrecastWorkerConsumerLag",
                        "exp_alerts": [{"exp_labels": {"severity": "ticket", "topic": "hb"}}],
                    },
                    {
                        "eval_time": "20m",
                        "alertname": "PrecastDeadLetters",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "ticket",
                                    "component": "worker",
                                    "reason": "bad_json",
                                }
                            }
                        ],
                    },
                    {"eval_time": "9m", "alertname": "PrecastModelFailures", "exp_alerts": []},
                    {
                        "eval_time": "13m",
                        "alertname": "PrecastModelFailures",
                        "exp_alerts": [
                            {"exp_labels": {"severity": "page", "model_version": "1.0.0"}}
                        ],
                    },
                    {"eval_time": "6m", "alertname": "PrecastFeatureDrift", "exp_alerts": []},
                    {
                        "eval_time": "10m",
                        "alertname": "PrecastFeatureDrift",
                        "exp_alerts": [{"exp_labels": {"severity": "ticket"}}],
                    },
                    {
                        "eval_time": "25m",
                        "alertname": "PrecastDriftMonitorBlind",
                        "exp_alerts": [{"exp_labels": {"severity": "ticket"}}],
                    },
                    {
                        "eval_time": "15m",
                        "alertname": "PrecastTargetDown",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "ticket",
                                    "job": "precast-worker",
                                    "instance": "w1",
                                }
                            }
                        ],
                    },
                    {
                        "eval_time": "10m",
                        "alertname": "PrecastAuditCheckpointStale",
                        "exp_alerts": [],
                    },
                    {
                        "eval_time": "14m",
                        "alertname": "PrecastAuditCheckpointStale",
                        "exp_alerts": [{"exp_labels": {"severity": "ticket"}}],
                    },
                ],
            }
        ],
    )
