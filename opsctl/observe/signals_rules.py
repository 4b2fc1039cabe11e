"""Alerts on what operators wait for and on how old the answers they are shown are (issue 26),
generated from precast.telemetry.objectives: the same constants drive the board's banner
(consumer_api.beacons.client_signals), so the banner and the alert are one rule.

- PrecastWaitOriginRising (page): an origin's share of the wait over the last 10 minutes is
  above 30 % and either was below it over the 3 hours before (`offset`), or its wait per view
  doubled against those hours (an origin that already held most of the wait got slower), while
  the wait's p95 over the last 10 minutes is past its objective. Six shares that sum to one
  always leave one large, so the share alone is never an alert: a change is.
- PrecastWaitAboveObjective (ticket): the wait's p95 past its objective for an hour, whatever
  the shares: a system that was slow from the start has no baseline to rise from.
- PrecastAnswerAgeAboveObjective (ticket): the p95 age of the answers shown past its objective.

The series are per replica and absent while no UI reports (consumer_api.beacons.beacon), so a quiet
night is no baseline; without a baseline nothing is rising.
"""

from __future__ import annotations

from typing import Any

from precast.telemetry.objectives import (
    AGE_OBJECTIVE_S,
    BASELINE_S,
    GROWTH,
    RECENT_S,
    SHARE_THRESHOLD,
    WAIT_OBJECTIVE_S,
)

SHARE = "precast_wait_origin_share"
PER_VIEW = "precast_wait_origin_per_view_seconds"
WAIT_P95 = "precast_wait_p95_seconds"
AGE_P95 = "precast_age_p95_seconds"


def _window(seconds: int) -> str:
    return f"{seconds // 3600}h" if seconds % 3600 == 0 else f"{seconds // 60}m"


RECENT, BASELINE = _window(RECENT_S), _window(BASELINE_S)


def _recent(metric: str, by: str = "origin") -> str:
    return f"avg by ({by}) (avg_over_time({metric}[{RECENT}]))"


def _baseline(metric: str) -> str:
    return f"avg by (origin) (avg_over_time({metric}[{BASELINE}] offset {RECENT}))"


def _p95(metric: str) -> str:
    return f"avg(avg_over_time({metric}[{RECENT}]))"


def rising_expr() -> str:
    return (
        f"(\n  {_recent(SHARE)} > {SHARE_THRESHOLD:g}\n  and (\n"
        f"    {_baseline(SHARE)} < {SHARE_THRESHOLD:g}\n"
        f"    or {_recent(PER_VIEW)}\n      > {GROWTH:g} * {_baseline(PER_VIEW)}\n  )\n)\n"
        f"and on () ({_p95(WAIT_P95)} > {WAIT_OBJECTIVE_S:g})"
    )


def _runbook(name: str) -> str:
    return f"docs/observability.md#{name.lower()}"


def rules_document() -> dict[str, Any]:
    wait_ms, age_s = f"{WAIT_OBJECTIVE_S * 1000:g} ms", f"{AGE_OBJECTIVE_S:g} s"
    rules: list[dict[str, Any]] = [
        {
            "alert": "PrecastWaitOriginRising",
            "expr": rising_expr(),
            "for": "5m",
            "labels": {"severity": "page"},
            "annotations": {
                "summary": "{{ $labels.origin }} rose to {{ $value | humanizePercentage }} of "
                f"what operators wait for, while p95 input -> shown is above {wait_ms}",
                "description": f"Its share of the wait over {RECENT} passed "
                f"{SHARE_THRESHOLD:.0%} from below over the {BASELINE} before (or its wait "
                f"per view grew {GROWTH:g}x), and the wait's p95 is past its {wait_ms} "
                "objective. network_qoe: the network; front_jank: the page; read: the API's "
                "event loop; db_lock: the store (Redis); edge: an edge cache in front; model: "
                "misses waiting for inference.",
                "runbook": _runbook("PrecastWaitOriginRising"),
            },
        },
        {
            "alert": "PrecastWaitAboveObjective",
            "expr": f"{_p95(WAIT_P95)} > {WAIT_OBJECTIVE_S:g}",
            "for": "1h",
            "labels": {"severity": "ticket"},
            "annotations": {
                "summary": f"p95 input -> shown has been above {wait_ms} for an hour: "
                "{{ $value | humanizeDuration }}",
                "runbook": _runbook("PrecastWaitAboveObjective"),
            },
        },
        {
            "alert": "PrecastAnswerAgeAboveObjective",
            "expr": f"{_p95(AGE_P95)} > {AGE_OBJECTIVE_S:g}",
            "for": "10m",
            "labels": {"severity": "ticket"},
            "annotations": {
                "summary": f"the answers operators are shown are old: p95 age above {age_s} "
                "({{ $value | humanizeDuration }})",
                "runbook": _runbook("PrecastAnswerAgeAboveObjective"),
            },
        },
    ]
    return {"groups": [{"name": "precast-signals", "rules": rules}]}
