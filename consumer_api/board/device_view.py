"""What the board shows of one device besides its row: its device context (from the compacted
device-context topic, `precast.fleet.snapshot`) and the summary of its stored answer (parsed
once per entry).

The context is shown generically, as the spec's `[context]` defines it: every context value,
and per open group (entities tracked by ID, e.g. work orders) the open entities with the field
values the group keeps and the values that count them; per window group (e.g. alarms) the
entries with their event time and the values that count them now (filter passed, inside the
value's window as of the snapshot's newest event)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import orjson

from precast.fleet.context import ContextModel, DeviceContext
from precast.guard import Guard
from precast.serving import Entry
from schemas.spec.context import OpenCount, WindowCount

# A stored body passed the serving checks, but a full parse may still fail (nesting deeper than
# this stack takes, a number out of range, a candidate without a score): a counted plain row.
GUARD = Guard("api-device-view", logging.getLogger("precast.api.board"))


@dataclass(frozen=True, slots=True)
class ContextView:
    """A device's context snapshot with its values read once (as of its newest event): the
    board's rows show them, sort and filter by them, without reading the snapshot again."""

    ctx: DeviceContext | None  # None: no snapshot for the device (the values are the defaults)
    values: tuple[float | int, ...]  # in ContextModel.names order; counts as int
    alarm: str


def label(name: str) -> str:
    """`open_work_orders` -> "Open work orders": what the board calls a spec name."""
    text = name.replace("_", " ")
    return text[:1].upper() + text[1:]


def _group_label(field: str | None, stream: str) -> str:
    """`work_order_id` -> "Work order"; a window group without an ID field: its stream."""
    return label(field.removesuffix("_id") if field else stream)


class ContextDetail:
    """The detail view's context, for one compiled context model."""

    def __init__(self, model: ContextModel, alerts: dict[str, str]) -> None:
        spec = model.spec
        self.model, self.alerts = model, alerts  # context value -> the alert state it raises
        self._open = []
        for g, og in enumerate(model.open_groups):
            readers = []
            for name in model.readers_of("open", g):
                c = spec.context[name]
                assert isinstance(c, OpenCount)
                where = tuple((og.fields.index(k), frozenset(v)) for k, v in c.where.items())
                readers.append((name, where))
            self._open.append((og, _group_label(og.entity, og.stream), tuple(readers)))
        self._windows = []
        for g, wg in enumerate(model.window_groups):
            wreaders = []
            for i, name in enumerate(model.readers_of("window", g)):
                w = spec.context[name]
                assert isinstance(w, WindowCount)
                wreaders.append((name, 1 << i, round(w.window_s * 1000)))
            self._windows.append((wg, _group_label(wg.distinct, wg.stream), tuple(wreaders)))

    def json(self, view: ContextView) -> dict[str, Any]:
        ctx = view.ctx
        assert ctx is not None
        return {
            "as_of_ms": ctx.as_of_ms,
            "alarm": view.alarm,
            "values": dict(zip(self.model.names, view.values, strict=True)),
            "open": [
                {
                    "label": lab,
                    "stream": og.stream,
                    "entity": og.entity,
                    "fields": list(og.fields),
                    "entities": [
                        {
                            "id": eid,
                            "values": dict(zip(og.fields, vals, strict=False)),
                            "counted_by": [
                                n for n, where in readers if all(vals[i] in ok for i, ok in where)
                            ],
                        }
                        for eid, vals in ctx.open[g].items()
                    ],
                }
                for g, (og, lab, readers) in enumerate(self._open)
            ],
            "windows": [
                {
                    "label": lab,
                    "stream": wg.stream,
                    "key": wg.distinct or "event_id",
                    "entries": [
                        self._entry(eid, t, mask, readers, ctx.as_of_ms)
                        for eid, (t, mask) in sorted(ctx.windows[g].items(), key=lambda x: -x[1][0])
                    ],
                }
                for g, (wg, lab, readers) in enumerate(self._windows)
            ],
        }

    def _entry(
        self, eid: str, t: int, mask: int, readers: tuple[tuple[str, int, int], ...], at: int
    ) -> dict[str, Any]:
        counted = [n for n, bit, w in readers if mask & bit and at - w <= t <= at]
        return {
            "id": eid,
            "event_time_ms": t,
            "counted_by": counted,
            # the alert states the values counting it raise (e.g. "critical")
            "alert": list(dict.fromkeys(self.alerts[n] for n in counted if n in self.alerts)),
        }


@dataclass(frozen=True, slots=True)
class Summary:
    """The fields of a stored answer that a fleet row shows (parsed once per stored entry)."""

    strategy: str
    score: float
    trigger: str


def summarize(e: Entry, default_strategy: str) -> Summary:
    try:
        doc = orjson.loads(e.body)
        top = doc["candidates"][0] if doc.get("candidates") else None
        return Summary(
            str(top["strategy"]) if top else default_strategy,
            float(top["score"]) if top else 0.0,
            str(doc.get("trigger", "")),
        )
    except Exception as exc:  # noqa: BLE001 - whatever a stored body holds: a plain row
        GUARD.reject(exc)
        return Summary(default_strategy, 0.0, "")
