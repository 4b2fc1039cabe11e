"""Grafana dashboards as code (grafana-foundation-sdk builders), one per service plus the SLOs,
speculation and drift. `precast observe generate` writes them to deploy/grafana/dashboards/,
which Grafana's file provisioning loads (deploy/grafana/provisioning/).

Every query uses fixed windows (no Grafana variables), so the integration test can evaluate
the exact PromQL against a live Prometheus and fail on an error or an empty answer.
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders.dashboard import Dashboard, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.builders.stat import Panel as Stat
from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

from opsctl.observe.panels import PRECOMPUTE, P, q
from opsctl.observe.panels_fleet import FLEET
from opsctl.observe.panels_signals import SIGNALS
from opsctl.observe.slo import SLOS

# The datasource uid provisioned in deploy/grafana/provisioning/datasources/prometheus.yml.
DATASOURCE = DataSourceRef(type_val="prometheus", uid="precast-prometheus")
SECTIONS: dict[str, tuple[str, dict[str, list[P]]]] = {**PRECOMPUTE, **FLEET, **SIGNALS}


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
        query = Dataquery().expr(expr).legend_format(legend or "__auto").ref_id(chr(ord("A") + i))
        b = b.with_target(query.exemplar(True) if p.exemplars else query)
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
