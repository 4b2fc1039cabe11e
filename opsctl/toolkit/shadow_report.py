"""The shadow run's report (terminal text, JSON, one self-contained HTML page) and its gate,
all from the summary file `python -m workers.shadow.run` writes. Pure: no Kafka, no models."""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass
from typing import Any

from precast.telemetry.progress import table

SHOWN_CHANGES = 20
SHOWN_SITES = 15  # a group of many values (sites): those with the lowest agreement; all in the JSON


@dataclass(frozen=True)
class Check:
    """One gate threshold: `value` must be >= `required` (or <= for a `max_` check)."""

    name: str
    value: float | None
    required: float
    at_most: bool = False

    @property
    def ok(self) -> bool:
        if self.value is None:
            return False
        return self.value <= self.required if self.at_most else self.value >= self.required

    def line(self) -> str:
        op = "<=" if self.at_most else ">="
        got = "n/a" if self.value is None else f"{self.value:.4f}"
        return (
            f"{'pass' if self.ok else 'FAIL'}  {self.name} {got} (required {op} {self.required:g})"
        )


@dataclass(frozen=True)
class Thresholds:
    agreement: float | None = None  # top-1 agreement overall
    top3_overlap: float | None = None
    min_predictions: int | None = None
    accuracy: float | None = None  # candidate top-1 accuracy against the truth
    max_ece: float | None = None  # candidate expected calibration error
    # candidate accuracy may be at most this much below the live model's, on the same truth
    max_accuracy_drop: float | None = None
    min_scored: int | None = None  # predictions scored against the truth

    @property
    def any(self) -> bool:
        return any(v is not None for v in asdict(self).values())


def gate(summary: dict[str, Any], t: Thresholds) -> list[Check]:
    c = summary["comparison"]
    o = c["overall"]
    cal = c.get("calibration", {}).get("candidate", {})
    checks = []
    if t.min_predictions is not None:
        checks.append(Check("predictions compared", o["predictions"], t.min_predictions))
    if t.agreement is not None:
        checks.append(Check("top-1 agreement", o["top1_agreement"], t.agreement))
    if t.top3_overlap is not None:
        checks.append(Check("top-3 overlap", o["top3_overlap"], t.top3_overlap))
    if t.accuracy is not None:
        checks.append(Check("candidate accuracy vs truth", cal.get("accuracy"), t.accuracy))
    if t.max_ece is not None:
        checks.append(Check("candidate calibration error", cal.get("ece"), t.max_ece, True))
    if t.min_scored is not None:
        checks.append(
            Check("predictions scored against the truth", cal.get("predictions", 0), t.min_scored)
        )
    if t.max_accuracy_drop is not None:
        live = c.get("calibration", {}).get("live", {}).get("accuracy")
        mine = cal.get("accuracy")
        gain = None if live is None or mine is None else mine - live
        checks.append(Check("candidate accuracy minus live accuracy", gain, -t.max_accuracy_drop))
    return checks


def truth_title(summary: dict[str, Any]) -> str:
    """What the calibration was measured against."""
    truth = summary.get("truth") or {}
    if "outcomes" in truth:
        return (
            f"calibration against the range's resolved work orders ({truth['devices']:,} devices)"
        )
    return "calibration against the simulator's ground truth (drifting devices left out)"


# -- terminal ---------------------------------------------------------------------------------------
def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f}%"


def _num(v: float | None, fmt: str = "{:.3f}") -> str:
    return "-" if v is None else fmt.format(v)


def group_rows(tallies: dict[str, dict[str, Any]], worst: int | None = None) -> list[list[Any]]:
    """One row per group, by name; or only the `worst` groups, lowest agreement first."""
    items = (
        sorted(tallies.items())
        if worst is None
        else sorted(tallies.items(), key=lambda kv: (kv[1]["top1_agreement"] or 0.0, kv[0]))[:worst]
    )
    return [
        [k, t["predictions"], _pct(t["top1_agreement"]), _pct(t["top3_overlap"])] for k, t in items
    ]


def transition_rows(c: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    labels = c["labels"]
    cols = ["live \\ candidate", *labels]
    return cols, [[lab, *row] for lab, row in zip(labels, c["transitions"], strict=True)]


def timing_rows(c: dict[str, Any], names: dict[str, str]) -> list[list[Any]]:
    rows = []
    for role in ("live", "candidate"):
        t = c["timing"][role]
        rows.append(
            [
                f"{role} {names[role]}",
                t["batches"],
                t["rows"],
                _num(t["ms_per_batch_mean"]),
                _num(t["ms_per_batch_p50"]),
                _num(t["ms_per_batch_p99"]),
                _num(t["rows_per_s"], "{:,.0f}"),
            ]
        )
    return rows


TIMING_COLUMNS = ["model", "batches", "rows", "ms/batch mean", "p50", "p99", "rows/s"]


def calibration_rows(c: dict[str, Any], names: dict[str, str]) -> list[list[Any]]:
    return [
        [
            f"{role} {names[role]}",
            cal["predictions"],
            _pct(cal["accuracy"]),
            _num(cal["mean_score"]),
            _num(cal["ece"], "{:.4f}"),
        ]
        for role, cal in c.get("calibration", {}).items()
    ]


CALIBRATION_COLUMNS = ["model", "scored", "top-1 accuracy", "mean top-1 score", "ECE"]
CHANGE_COLUMNS = ["device", "gap", "live", "score", "candidate", "score", "trigger"]


def change_rows(c: dict[str, Any], limit: int = SHOWN_CHANGES) -> list[list[Any]]:
    return [
        [
            x["device"],
            _num(x["gap"]),
            x["live"],
            _num(x["live_score"]),
            x["candidate"],
            _num(x["candidate_score"]),
            x["trigger"],
        ]
        for x in c["top_changes"][:limit]
    ]


def names(summary: dict[str, Any]) -> dict[str, str]:
    return {r: summary[r]["version"] for r in ("live", "candidate")}


def render_text(summary: dict[str, Any], checks: list[Check]) -> str:
    c, n = summary["comparison"], names(summary)
    o = c["overall"]
    rate = summary.get("records_per_s")
    out = [
        f"shadow: live {n['live']} vs candidate {n['candidate']} over {summary['records']:,} "
        f"event records ({summary['policy']}); {o['predictions']:,} predictions compared"
        + (f"; {rate:,.0f} records/s" if rate else ""),
        f"candidate outputs: topic {summary['shadow_topic']} (never served)",
        "",
        f"top-1 agreement {_pct(o['top1_agreement'])}   top-3 overlap {_pct(o['top3_overlap'])}   "
        f"devices whose top-1 changed: {c['changed_devices']:,}",
    ]
    cols = ["", "predictions", "top-1 agreement", "top-3 overlap"]
    for g in _groups(c):
        values = c["by"][g]
        if len(values) > SHOWN_SITES:
            title = f"by {_title(g)} (the {SHOWN_SITES} of {len(values)} with the lowest agreement)"
            out += ["", title, table(cols, group_rows(values, SHOWN_SITES))]
        elif values:
            out += ["", f"by {_title(g)}", table(cols, group_rows(values))]
    tcols, trows = transition_rows(c)
    out += ["", "top-1 transitions (rows: live, columns: candidate)", table(tcols, trows)]
    if c["top_changes"]:
        out += [
            "",
            f"largest top-1 changes (gap = candidate's score of its top-1 minus its score of "
            f"the live top-1; {len(c['top_changes'])} kept)",
            table(CHANGE_COLUMNS, change_rows(c)),
        ]
    out += ["", "inference per batch", table(TIMING_COLUMNS, timing_rows(c, n))]
    if c.get("calibration"):
        out += [
            "",
            truth_title(summary),
            table(CALIBRATION_COLUMNS, calibration_rows(c, n)),
        ]
    if c["rejected"]:
        bad = ", ".join(f"{k} {v:,}" for k, v in c["rejected"].items())
        out += ["", f"records the pipeline rejects (not dead-lettered again): {bad}"]
    if checks:
        out += ["", "gate:", *(f"  {ch.line()}" for ch in checks)]
    return "\n".join(out)


# -- HTML ---------------------------------------------------------------------------------------------
_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222;max-width:72em}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.2em .6em}
th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#17692c;font-weight:600}.fail{color:#b3261e;font-weight:600}
.big{font-size:1.6em;font-weight:600;margin-right:1.5em}
"""


def _table_html(columns: list[str], rows: list[list[Any]], heat: bool = False) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    peak = max((v for r in rows for v in r[1:] if isinstance(v, int)), default=0) if heat else 0
    body = []
    for r in rows:
        cells = []
        for j, v in enumerate(r):
            num = isinstance(v, int | float) or (isinstance(v, str) and v[:1].isdigit())
            style = ""
            if heat and j and isinstance(v, int) and peak:
                diag = rows.index(r) + 1 == j
                hue = 130 if diag else 0
                style = f' style="background:hsla({hue},60%,45%,{0.08 + 0.6 * v / peak:.2f})"'
            text = f"{v:,}" if isinstance(v, int) else html.escape(str(v))
            cells.append(f"<td{' class=n' if num else ''}{style}>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def render_html(summary: dict[str, Any], checks: list[Check]) -> str:
    c, n = summary["comparison"], names(summary)
    o = c["overall"]
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset=utf-8>",
        f"<title>shadow {e(n['live'])} vs {e(n['candidate'])}</title><style>{_CSS}</style>",
        "</head><body>",
        f"<h1>Shadow evaluation: live {e(n['live'])} vs candidate {e(n['candidate'])}</h1>",
        f"<p>{summary['records']:,} event records ({e(summary['policy'])}), "
        f"{o['predictions']:,} predictions compared; candidate outputs in topic "
        f"<code>{e(summary['shadow_topic'])}</code>, never served.</p>",
        f"<p><span class=big>top-1 agreement {_pct(o['top1_agreement'])}</span>"
        f"<span class=big>top-3 overlap {_pct(o['top3_overlap'])}</span>"
        f"<span class=big>{c['changed_devices']:,} devices change top-1</span></p>",
    ]
    if checks:
        items = "".join(
            f"<li class={'pass' if ch.ok else 'fail'}>{e(ch.line())}</li>" for ch in checks
        )
        parts.append(f"<h2>Gate</h2><ul>{items}</ul>")
    cols = ["", "predictions", "top-1 agreement", "top-3 overlap"]
    for g in _groups(c):
        parts.append(f"<h2>By {e(_title(g))}</h2>")
        parts.append(_table_html(cols, group_rows(c["by"][g])))
    tcols, trows = transition_rows(c)
    parts.append("<h2>Top-1 transitions (rows: live, columns: candidate)</h2>")
    parts.append(_table_html(tcols, trows, heat=True))
    parts.append("<h2>Largest top-1 changes</h2>")
    parts.append(
        "<p>gap = the candidate's score of its own top-1 minus its score of the live top-1</p>"
    )
    parts.append(_table_html(CHANGE_COLUMNS, change_rows(c, len(c["top_changes"]))))
    parts.append("<h2>Inference per batch</h2>")
    parts.append(_table_html(TIMING_COLUMNS, timing_rows(c, n)))
    if c.get("calibration"):
        parts.append(f"<h2>{html.escape(truth_title(summary).capitalize())}</h2>")
        parts.append(_table_html(CALIBRATION_COLUMNS, calibration_rows(c, n)))
        for role, cal in c["calibration"].items():
            rows = [
                [
                    f"{b['from']:.1f}-{b['to']:.1f}",
                    b["predictions"],
                    _num(b["mean_score"]),
                    _pct(b["accuracy"]),
                ]
                for b in cal["bins"]
                if b["predictions"]
            ]
            parts.append(f"<h3>{e(role)} {e(n[role])}: reliability</h3>")
            parts.append(
                _table_html(["top-1 score", "predictions", "mean score", "accuracy"], rows)
            )
    parts.append("</body></html>")
    return "\n".join(parts)


def _groups(c: dict[str, Any]) -> list[str]:
    """The comparison's groups, few-valued ones first (a summary before the fleet spec named
    them had device type, site and trigger)."""
    groups = c.get("groups") or list(c["by"])
    return sorted(groups, key=lambda g: len(c["by"].get(g, {})) > SHOWN_SITES)


def _title(group: str) -> str:
    return group.replace("_", " ")
