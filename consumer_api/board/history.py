"""A device's past answers as the board's history shows them, kept small.

The board keeps up to `board_history_depth - 1` earlier answers for each of up to
`board_history_devices` devices. Kept as whole `Entry`s, each held its PredictionSet body and
lineage (about 850 bytes with the objects around it): a replica's RSS grew for as long as
those rings were filling (10 to 28 % over a 10-minute soak with 3,000 devices; issue 27, docs/
workers.md "Memory"), towards a bound of about 80 MB at the default 10,000 devices. A `Past`
keeps only what the history shows (times, model, trigger, the candidates as their JSON).
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import orjson

from precast.guard import Guard
from precast.serving import Entry

__all__ = ["Past", "history_item", "past"]


class _Shown(msgspec.Struct):
    """What a history item reads of a body; every other member is skipped unparsed."""

    candidates: msgspec.Raw = msgspec.Raw(b"[]")
    trigger: Any = None


_SHOWN = msgspec.json.Decoder(_Shown)
# A stored body passed the serving checks, but a parse here may still fail (nesting a deeper
# stack cannot take, numbers orjson does not read): counted, and the item shows no candidates.
GUARD = Guard("api-board-history", logging.getLogger("precast.api.board"))


class Past(msgspec.Struct, frozen=True, gc=False):
    """One earlier answer of a device (immutable, not tracked by the collector: see Entry)."""

    computed_at_ms: int
    produced_at_ms: int
    valid_until_ms: int
    model_version: str
    trigger: str | None
    candidates: bytes  # the body's candidates array, as JSON


def past(e: Entry) -> Past:
    try:
        shown = _SHOWN.decode(e.body)
        cands = bytes(shown.candidates)  # a copy: a Raw would keep the whole body alive
        trigger = shown.trigger if isinstance(shown.trigger, str) else None
    except Exception as exc:  # noqa: BLE001 - whatever the body holds: show none
        GUARD.reject(exc)
        cands, trigger = b"[]", None
    return Past(
        e.computed_at_ms,
        e.produced_at_ms,
        e.valid_until_ms,
        e.model_version,
        trigger,
        cands,
    )


def history_item(p: Past | Entry, default_strategy: str) -> dict[str, Any]:
    if isinstance(p, Entry):
        p = past(p)
    try:
        candidates = orjson.loads(p.candidates)
    except Exception as exc:  # noqa: BLE001 - see GUARD
        GUARD.reject(exc)
        candidates = []
    if not isinstance(candidates, list):
        candidates = []
    return {
        "computed_at_ms": p.computed_at_ms,
        "produced_at_ms": p.produced_at_ms,
        "valid_until_ms": p.valid_until_ms,
        "model_version": p.model_version,
        "trigger": p.trigger,
        "candidates": candidates or [{"strategy": default_strategy, "score": 1.0}],
    }
