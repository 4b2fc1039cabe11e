"""What the board shows of a fleet, compiled once from its spec's `[board]` (docs/board.md).

A board row is one array per device, in `columns` order:
- the board's own columns (FIXED): the answer's top-1 strategy, score, source, times, delay
  origin, model version and trigger;
- then the spec's `board.columns` in its order: heartbeat fields (read from the device's
  heartbeats by the board feed) and context values (from its device-context snapshot, as of
  the newest event folded into it), with the alarm state (`alarm`, when the spec declares
  `board.alert` rules) just before the first context value;
- then the `board.filters` that are not columns: the board filters on them without showing them.

The browser gets `config()` with every fleet snapshot (`layout` in GET /v1/board/fleet): the
table's columns with labels, value types and widths, the filters, the alarm states in rank
order and what a device's detail view lists. The page itself knows no fleet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from consumer_api.board.device_view import ContextDetail, ContextView, label
from consumer_api.read.answer import FALLBACK, PRECOMPUTED, STALE
from precast.fleet import Fleet
from precast.fleet.context import DeviceContext
from schemas.spec.context import Last, OpenCount, TimeSinceLast, WindowCount
from schemas.spec.fields import Attribute, Boolean, Categorical, Metric
from schemas.spec.model import BOARD_RESERVED, FleetSpec

FIXED = (
    "device_id",
    "strategy",
    "score",
    "source",
    "computed_at_ms",
    "valid_until_ms",
    "delay_origin",
    "model_version",
    "trigger",
    # [partition, generation, until_ms, own valid_until_ms, certified_at_ms, strategy, score,
    # computed_at_ms]: an answer validity leases may extend (the board applies `lease` events
    # to the row itself, an expired one included); null otherwise. Not shown, not sortable.
    "lease",
)
ALARM = "alarm"
NO_ALARM = "none"  # the alarm state of a device no alert rule fires for
AGE = "age_ms"  # sortable and shown, computed from computed_at_ms (in the browser: it ticks)
SOURCES = (PRECOMPUTED, STALE, FALLBACK)
assert set(FIXED) | {ALARM, AGE} <= BOARD_RESERVED  # the spec check refuses these names

_NULLABLE = ["null"]


@dataclass(frozen=True)
class Column:
    """One column of a board row: how the browser shows it and what JSON type it holds."""

    name: str
    label: str
    type: str  # device strategy score source age origin | text number count boolean alarm
    json: dict[str, Any]
    unit: str = ""
    width: int = 8  # share of the table's width, relative to the other columns
    description: str = ""

    def doc(self) -> dict[str, Any]:
        # A header wraps onto two lines at most: a long label gets room for half of it.
        shown = len(self.label) + (len(self.unit) + 3 if self.unit else 0)
        width = max(self.width, min(16, (shown + 1) // 2 + 4))
        d = {"name": self.name, "label": self.label, "type": self.type, "width": width}
        if self.unit:
            d["unit"] = self.unit
        if self.description:
            d["description"] = self.description
        return d


def _unit(u: str) -> str:
    return "" if u in ("", "1") else u  # "1": dimensionless, nothing to show


def _fixed(states: tuple[str, ...]) -> dict[str, Column]:
    maybe = {"type": ["string", "null"]}
    time = {"type": ["integer", "null"]}
    cols = [
        Column("device_id", "Device", "device", {"type": "string"}, width=12),
        Column("strategy", "Top strategy", "strategy", {"type": "string"}, width=15),
        Column("score", "Score", "score", {"type": "number"}, width=6),
        Column("source", "Source", "source", {"enum": list(SOURCES)}, width=13),
        Column("computed_at_ms", "Computed at", "time", time),
        Column("valid_until_ms", "Valid until", "time", time),
        Column("delay_origin", "Age origin", "origin", {"type": "string"}, width=9),
        Column("model_version", "Model version", "text", maybe),
        Column("trigger", "Trigger", "text", maybe),
        Column("lease", "Lease", "lease", {"type": ["array", "null"]}),
        Column(AGE, "Age", "age", {"type": ["integer", "null"]}, width=7),
        # as wide as its longest state (a cell never cuts "warning" short)
        Column(
            ALARM, "Alarm", "alarm", {"enum": list(states)}, width=max(8, max(map(len, states)) + 2)
        ),  # fmt: skip
    ]
    return {c.name: c for c in cols}


def _field_column(spec: FleetSpec, name: str) -> Column:
    f = spec.field(name)
    assert f is not None
    desc = f.description
    if isinstance(f, Metric):
        return Column(name, label(name), "number", {"type": ["number", "null"]}, _unit(f.unit),
                      description=desc)  # fmt: skip
    if isinstance(f, Boolean):
        return Column(name, label(name), "boolean", {"type": ["boolean", "null"]}, description=desc)
    if isinstance(f, Attribute) and f.type != "string":
        return Column(name, label(name), "number", {"type": [f.type, "null"]}, description=desc)
    width = 12 if isinstance(f, Categorical) else 11
    return Column(name, label(name), "text", {"type": ["string", "null"]}, width=width,
                  description=desc)  # fmt: skip


def _context_column(spec: FleetSpec, name: str) -> Column:
    c = spec.context[name]
    if isinstance(c, OpenCount | WindowCount):
        return Column(name, label(name), "count", {"type": "integer"}, description=c.description)
    unit = ""
    if isinstance(c, TimeSinceLast):
        unit = c.unit
    elif isinstance(c, Last):
        f = spec.streams[c.stream].fields.get(c.field)
        unit = _unit(f.unit) if isinstance(f, Metric) else ""
    return Column(name, label(name), "number", {"type": "number"}, unit, description=c.description)


class BoardLayout:
    """The board of one fleet spec: row layout, columns shown, filters, alarm state, detail."""

    def __init__(self, fleet: Fleet) -> None:
        spec, b = fleet.spec, fleet.spec.board
        self.fleet, self.spec = fleet, spec
        self.context = fleet.context
        # heartbeat fields the board reads from each device's heartbeats, in this order
        self.info_fields = tuple(
            dict.fromkeys(n for n in (*b.columns, *b.filters, *b.detail) if spec.field(n))
        )
        self.no_info: tuple[Any, ...] = (None,) * len(self.info_fields)
        names = self.context.names
        self._alert = tuple((r.state, names.index(r.context)) for r in b.alert)
        self.states = (*dict.fromkeys(r.state for r in b.alert), NO_ALARM)
        self.rank = {s: i for i, s in enumerate(self.states)}  # alarm sort: first rule first
        self._counts = tuple(isinstance(spec.context[n], OpenCount | WindowCount) for n in names)
        fixed = _fixed(self.states)
        # (part, position) of each spec column of a row: 0 info, 1 context value, 2 alarm
        plan: list[tuple[int, int]] = []
        cols: list[Column] = []
        alarm_left = bool(b.alert)
        for n in b.columns:
            if spec.field(n) is not None:
                plan.append((0, self.info_fields.index(n)))
                cols.append(_field_column(spec, n))
                continue
            if alarm_left:
                plan.append((2, 0))
                cols.append(fixed[ALARM])
                alarm_left = False
            plan.append((1, names.index(n)))
            cols.append(_context_column(spec, n))
        if alarm_left:
            plan.append((2, 0))
            cols.append(fixed[ALARM])
        shown = [fixed[n] for n in ("device_id", "strategy", "score", "source", AGE)]
        self.display = (*shown, fixed["delay_origin"], *cols)
        hidden = [n for n in b.filters if n not in b.columns]
        for n in hidden:
            plan.append((0, self.info_fields.index(n)))
            cols.append(_field_column(spec, n))
        self._plan = tuple(plan)
        self.row_columns = (*(fixed[n] for n in FIXED), *cols)
        self.columns = tuple(c.name for c in self.row_columns)
        self.index = {n: i for i, n in enumerate(self.columns)}
        self.sortable = (frozenset(self.columns) - {"lease"}) | {AGE}
        # a device's detail view: its heartbeat columns, then `board.detail`
        by_name = {c.name: c for c in self.row_columns}
        self.detail_columns = tuple(
            by_name.get(n) or _field_or_context(spec, n)
            for n in dict.fromkeys((*(c for c in b.columns if spec.field(c)), *b.detail))
        )
        # filters: the spec's, then the board's own (as the page lists them)
        self.field_filters = tuple(b.filters)
        self.filters = (*b.filters, "strategy", *((ALARM,) if b.alert else ()), "source")
        self._detail = ContextDetail(self.context, {names[i]: s for s, i in reversed(self._alert)})
        self.empty = ContextView(None, self._convert(self.context.empty()), NO_ALARM)
        self.no_tail = self.tail(self.no_info, self.empty)

    # -- values --------------------------------------------------------------------------------
    def _convert(self, raw: tuple[float, ...]) -> tuple[float | int, ...]:
        return tuple(int(v) if c else v for v, c in zip(raw, self._counts, strict=True))

    def view(self, ctx: DeviceContext) -> ContextView:
        """A snapshot's context values as of its newest event, and the alarm state they give.
        Raises (ValueError, LookupError, TypeError) for values a malformed snapshot holds."""
        raw = self.context.values(ctx, ctx.as_of_ms)
        alarm = next((s for s, i in self._alert if raw[i] > 0), NO_ALARM)
        return ContextView(ctx, self._convert(raw), alarm)

    def info(self, event: Mapping[str, Any]) -> tuple[Any, ...]:
        """What the board keeps of a device's heartbeat (a flat, validated event)."""
        return tuple(event.get(n) for n in self.info_fields)

    def tail(self, info: tuple[Any, ...], view: ContextView) -> tuple[Any, ...]:
        """The spec's part of a row (after FIXED)."""
        parts = (info, view.values, (view.alarm,))
        return tuple(parts[p][i] for p, i in self._plan)

    def detail(self, info: tuple[Any, ...], view: ContextView | None) -> dict[str, Any]:
        """The detail view's fields (heartbeat columns and `board.detail`) and context."""
        values = (view or self.empty).values
        fields: dict[str, Any] = {}
        for n in (c.name for c in self.detail_columns):
            if n in self.info_fields:
                fields[n] = info[self.info_fields.index(n)]
            else:
                fields[n] = values[self.context.names.index(n)]
        return {
            "fields": fields,
            "context": None if view is None or view.ctx is None else self._detail.json(view),
        }

    # -- what the browser gets -------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        spec, names = self.spec, self.context.names
        return {
            "fleet": {"name": spec.fleet.name, "version": spec.fleet.version},
            "columns": list(self.columns),
            "display": [c.doc() for c in self.display],
            "filters": [{"name": n, "label": label(n)} for n in self.filters],
            "alarm_states": list(self.states),
            "detail": [c.doc() for c in self.detail_columns],
            "context": [_context_column(spec, n).doc() for n in names],
            # per stream, the units of its metrics (the lineage events of a device's detail)
            "units": {
                s: {
                    n: _unit(f.unit)
                    for n, f in st.fields.items()
                    if isinstance(f, Metric) and _unit(f.unit)
                }
                for s, st in spec.streams.items()
            },  # fmt: skip
        }


def _field_or_context(spec: FleetSpec, name: str) -> Column:
    return _field_column(spec, name) if spec.field(name) else _context_column(spec, name)
