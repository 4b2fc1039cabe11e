"""promtool rule tests of the alerts on what operators wait for (issue 26,
deploy/alerts/precast-signals.rules.yml): a healthy series raises nothing, whatever its
shape; an injected slow network names network_qoe, a store stall db_lock, a slow front end
front_jank; a share that rises while people still wait less than the objective raises
nothing; the wait and the age objectives ticket on their own.

The input series are what the read API publishes for steady clients
(consumer_api.beacons.beacon): per origin the share of the wait and the wait per view, and the p95s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from precast.telemetry.objectives import WAIT_ORIGINS
from tests.unit.test_alert_rules import _run_promtool

RISING, WAIT, AGE = (
    "PrecastWaitOriginRising",
    "PrecastWaitAboveObjective",
    "PrecastAnswerAgeAboveObjective",
)
# A view's wait by origin (ms). Locally the page is most of it (loopback network); over the
# internet the network is.
LOOPBACK = {"network_qoe": 3.0, "front_jank": 40.0, "read": 0.05, "db_lock": 0.02, "model": 0.0}
INTERNET = {"network_qoe": 60.0, "front_jank": 25.0, "read": 0.05, "db_lock": 0.02, "model": 0.0}
HEALTHY_AGE_S = 4.0  # renewed a second before a 5 s horizon
BASE_MIN = 200  # the baseline before a change: more than 3 h 10 m


def _values(phases: list[tuple[int, float]]) -> str:
    """One sample a minute: `minutes` samples of each value in turn."""
    return " ".join(f"{v:g}x{n - 1}" for n, v in phases)


def _series(
    phases: list[tuple[int, dict[str, float]]], age_s: list[tuple[int, float]] | None = None
):
    """What one replica publishes for `minutes` of steady views of each shape in turn."""
    inst = 'instance="api-1",job="precast-api"'
    out = []
    for o in WAIT_ORIGINS:
        shares = [(n, v.get(o, 0.0) / sum(v.values())) for n, v in phases]
        per_view = [(n, v.get(o, 0.0) / 1000) for n, v in phases]  # no edge: 0
        out.append(
            {
                "series": f'precast_wait_origin_share{{{inst},origin="{o}"}}',
                "values": _values(shares),
            }
        )
        out.append(
            {
                "series": f'precast_wait_origin_per_view_seconds{{{inst},origin="{o}"}}',
                "values": _values(per_view),
            }
        )
    # steady views all take the same time: that is their p95
    p95 = [(n, sum(v.values()) / 1000) for n, v in phases]
    out.append({"series": f"precast_wait_p95_seconds{{{inst}}}", "values": _values(p95)})
    total = sum(n for n, _ in phases)
    ages = age_s or [(total, HEALTHY_AGE_S)]
    out.append({"series": f"precast_age_p95_seconds{{{inst}}}", "values": _values(ages)})
    return out


def _test(series: list[dict[str, str]], checks: list[tuple[str, str, list[str]]]) -> dict[str, Any]:
    """checks: (eval_time, alertname, origins firing; [""] for one alert without an origin)."""
    severity = {RISING: "page", WAIT: "ticket", AGE: "ticket"}
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {
                "eval_time": t,
                "alertname": name,
                "exp_alerts": [
                    {"exp_labels": {"severity": severity[name], **({"origin": o} if o else {})}}
                    for o in origins
                ],
            }
            for t, name, origins in checks
        ],
    }


def _never(times: tuple[str, ...]) -> list[tuple[str, str, list[str]]]:
    return [(t, name, []) for t in times for name in (RISING, WAIT, AGE)]


def test_a_healthy_series_raises_nothing_whatever_its_shape(tmp_path: Path):
    # The page holds 93 % of the wait locally, the network 70 % over the internet: one share is
    # always large, and stays so. Answers' ages near their horizon, but within it.
    times = ("30m", "3h", "3h20m", "4h", "5h")
    _run_promtool(
        tmp_path,
        [
            _test(_series([(300, LOOPBACK)]), _never(times)),
            _test(_series([(300, INTERNET)]), _never(times)),
        ],
    )


def _change(base: dict[str, float], **ms: float) -> dict[str, float]:
    return {**base, **ms}


@pytest.mark.parametrize(
    "base, change, origin",
    [
        (INTERNET, {"network_qoe": 900.0}, "network_qoe"),  # already most of it: it grew 15x
        (INTERNET, {"db_lock": 700.0}, "db_lock"),  # the store stalls every read
        (INTERNET, {"front_jank": 900.0}, "front_jank"),  # from 29 % to 94 %
        (LOOPBACK, {"front_jank": 900.0}, "front_jank"),  # from 93 %: it grew 22x
        (LOOPBACK, {"network_qoe": 900.0}, "network_qoe"),
    ],
    ids=[
        "slow-network",
        "store-stall",
        "slow-front-end",
        "slow-front-end-local",
        "slow-network-local",
    ],
)
def test_an_injected_slowdown_names_its_origin(tmp_path: Path, base, change, origin):
    series = _series([(BASE_MIN, base), (40, _change(base, **change))])
    at = lambda m: f"{BASE_MIN + m}m"  # noqa: E731  (minutes after the change)
    _run_promtool(
        tmp_path,
        [
            _test(
                series,
                [
                    (at(-1), RISING, []),
                    (at(3), RISING, []),  # not yet: a 10-minute share, then 5 minutes pending
                    (at(20), RISING, [origin]),  # only that origin
                    (at(39), RISING, [origin]),
                    (at(39), WAIT, []),  # an hour past the objective is the other alert
                ],
            )
        ],
    )


def test_a_share_that_rises_while_the_wait_is_within_its_objective_raises_nothing(tmp_path):
    series = _series([(BASE_MIN, INTERNET), (60, _change(INTERNET, network_qoe=300.0))])
    _run_promtool(tmp_path, [_test(series, _never((f"{BASE_MIN + 20}m", f"{BASE_MIN + 59}m")))])


def test_a_wait_past_its_objective_from_the_start_tickets_after_an_hour(tmp_path):
    # No baseline to rise from (the API just started, already slow): the objective alone.
    series = _series([(100, _change(LOOPBACK, network_qoe=800.0))])
    _run_promtool(
        tmp_path,
        [
            _test(
                series,
                [
                    ("50m", WAIT, []),
                    ("80m", WAIT, [""]),
                    ("80m", RISING, []),
                ],
            )
        ],
    )


def test_old_answers_ticket_on_the_age_objective(tmp_path):
    series = _series([(60, LOOPBACK)], age_s=[(30, HEALTHY_AGE_S), (30, 12.0)])
    _run_promtool(
        tmp_path,
        [
            _test(
                series,
                [("29m", AGE, []), ("33m", AGE, []), ("50m", AGE, [""]), ("50m", RISING, [])],
            )
        ],
    )
