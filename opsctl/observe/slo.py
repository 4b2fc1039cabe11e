"""The pipeline's SLOs and their Prometheus rules, generated so the three SLOs share one shape:
an error-ratio recording rule per window, and multi-window, multi-burn-rate alerts as in the
Google SRE workbook (chapter 5, "Alerting on SLOs"):

- page when the error budget burns 14.4x over 1 h *and* 5 m (2 % of a 30-day budget in an
  hour), or 6x over 6 h *and* 30 m (5 % in six hours);
- ticket when it burns 1x over 3 d *and* 6 h (on course to spend the whole budget).

The long window says the burn is significant, the short one that it is still happening, so an
alert resets minutes after the problem does.

Quiet while a healthy stack starts (issue 39): a burn counts only once the long window holds
`MIN_EVENTS` events and `MIN_BAD` bad ones (a few early reads or late predictions are no
evidence of anything: a 3-day window three minutes after a start holds three minutes), and
the hit ratio leaves out reads of devices that have no answer yet (`unknown_device`: before a
device's first prediction, every device while a deployment starts). A store that lost its data
shows as unknown devices too: `PrecastUnknownDeviceReads` (precast-api.rules.yml) watches that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

WINDOWS = ("5m", "30m", "1h", "6h", "3d")
RECORD = "precast:slo_error_ratio:rate{w}"
# Events, and bad events, a long window must hold before its error ratio may page or ticket.
MIN_EVENTS = 100
MIN_BAD = 10


@dataclass(frozen=True)
class Burn:
    severity: str
    factor: float
    long: str
    short: str


PAGE = (Burn("page", 14.4, "1h", "5m"), Burn("page", 6.0, "6h", "30m"))
TICKET = (Burn("ticket", 1.0, "3d", "6h"),)


@dataclass(frozen=True)
class Slo:
    name: str
    title: str
    objective: float  # share of good events
    summary: str
    error_ratio: str  # PromQL with {w} for the window
    volume: str | None = None  # PromQL with {w}: events in the window (None: no minimum)
    bad: str | None = None  # PromQL with {w}: bad events in the window (None: no minimum)

    @property
    def budget(self) -> float:
        return round(1.0 - self.objective, 10)

    def alert_name(self, severity: str) -> str:
        return f"Precast{self.title.replace(' ', '')}BudgetBurn{'Fast' if severity == 'page' else 'Slow'}"

    def ratio(self, window: str) -> str:
        return f'{RECORD.format(w=window)}{{slo="{self.name}"}}'


SLOS: tuple[Slo, ...] = (
    Slo(
        "freshness",
        "Freshness",
        0.99,
        "99 % of predictions are produced within 1 s of their newest input's event time",
        # prometheus_client writes bucket bounds as floats: le="1.0"
        '1 - (sum(rate(precast_worker_event_to_prediction_seconds_bucket{{le="1.0"}}[{w}]))'
        " / sum(rate(precast_worker_event_to_prediction_seconds_count[{w}])))",
        "sum(increase(precast_worker_event_to_prediction_seconds_count[{w}]))",
        "sum(increase(precast_worker_event_to_prediction_seconds_count[{w}]))"
        ' - sum(increase(precast_worker_event_to_prediction_seconds_bucket{{le="1.0"}}[{w}]))',
    ),
    Slo(
        "hit_ratio",
        "Hit Ratio",
        0.999,
        "99.9 % of reads are answered from a precomputed prediction, not the fallback",
        # Fallbacks for a reason that means "no answer we should have had" over the reads of
        # devices that have had one (reads of unknown devices are left out of both).
        'sum(rate(precast_api_fallbacks_total{{reason!="unknown_device"}}[{w}]))'
        " / (sum(rate(precast_api_reads_total[{w}]))"
        ' - sum(rate(precast_api_fallbacks_total{{reason="unknown_device"}}[{w}])))',
        "sum(increase(precast_api_reads_total[{w}]))"
        ' - sum(increase(precast_api_fallbacks_total{{reason="unknown_device"}}[{w}]))',
        'sum(increase(precast_api_fallbacks_total{{reason!="unknown_device"}}[{w}]))',
    ),
    Slo(
        "api_availability",
        "Api Availability",
        0.999,
        "99.9 % of scrapes find every read-API replica up (/metrics answers)",
        '1 - avg(avg_over_time(up{{job="precast-api"}}[{w}]))',
    ),
)


def recording_rules(slo: Slo) -> list[dict[str, Any]]:
    return [
        {
            "record": RECORD.format(w=w),
            "expr": slo.error_ratio.format(w=w),
            "labels": {"slo": slo.name},
        }
        for w in WINDOWS
    ]


def _burn_expr(slo: Slo, burns: tuple[Burn, ...]) -> str:
    parts = []
    for b in burns:
        enough = ""
        if slo.volume is not None:
            enough += f" and on() ({slo.volume.format(w=b.long)}) >= {MIN_EVENTS}"
        if slo.bad is not None:
            enough += f" and on() ({slo.bad.format(w=b.long)}) >= {MIN_BAD}"
        parts.append(
            f"({slo.ratio(b.long)} > ({b.factor:g} * {slo.budget:g})"
            f" and {slo.ratio(b.short)} > ({b.factor:g} * {slo.budget:g}){enough})"
        )
    return "\nor\n".join(parts)


def alert_rules(slo: Slo) -> list[dict[str, Any]]:
    out = []
    for severity, burns in (("page", PAGE), ("ticket", TICKET)):
        windows = ", ".join(f"{b.factor:g}x over {b.long} and {b.short}" for b in burns)
        out.append(
            {
                "alert": slo.alert_name(severity),
                "expr": _burn_expr(slo, burns),
                "labels": {"severity": severity, "slo": slo.name},
                "annotations": {
                    "summary": f"{slo.name} SLO error budget burning ({windows})",
                    "description": f"SLO: {slo.summary}. Error ratio over {burns[0].long}: "
                    "{{ $value | humanizePercentage }} "
                    f"(budget {slo.budget:.2%}, {burns[0].factor:g}x = "
                    f"{burns[0].factor * slo.budget:.2%}).",
                    "runbook": f"docs/observability.md#{slo.alert_name(severity).lower()}",
                },
            }
        )
    return out


def rules_document() -> dict[str, Any]:
    return {
        "groups": [
            {
                "name": f"precast-slo-{slo.name}",
                "rules": [*recording_rules(slo), *alert_rules(slo)],
            }
            for slo in SLOS
        ]
    }
