"""Hashes that say when two specs mean the same thing.

- `feature_hash`: everything that shapes the feature vector — each feature's definition (source,
  transform and parameters, missing rule) in order, and the definition of every field and
  context value a feature reads (kind, unit, range and policy, vocabulary, window, filters).
  Descriptions, display order, wire paths (where a value is read, not what it means), the
  board, serving and the simulator are left out. A model is bound to it; a worker refuses a
  model bound to another; worker-state records carry it.
- `context_hash`: the context definitions and the fields they read; device-context snapshots
  carry it, and the context aggregator names its state after it, so a changed definition is
  rebuilt from the topics instead of misread.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from schemas.spec.model import FleetSpec

_NOT_MEANING = {"description", "path", "change_scale"}


def _meaning(model: Any) -> Any:
    d = model.model_dump(mode="json")
    return {k: v for k, v in d.items() if k not in _NOT_MEANING}


def _digest(doc: Any) -> str:
    return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _context_doc(spec: FleetSpec, names: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        c = spec.context[name]
        s = spec.streams[c.stream]
        used = {*c.where, *(getattr(c, a, None) for a in ("entity", "status", "distinct", "field"))}
        out[name] = {
            "definition": _meaning(c),
            "fields": {k: _meaning(f) for k, f in s.fields.items() if k in used},
        }
    return out


def feature_hash(spec: FleetSpec) -> str:
    sources: dict[str, Any] = {}
    contexts: list[str] = []
    for f in spec.features:
        for name in (f.source, f.by):
            if name is None:
                continue
            field = spec.field(name)
            if field is not None:
                sources[name] = _meaning(field)
            elif name in spec.context and name not in contexts:
                contexts.append(name)
    return _digest(
        {
            "features": [_meaning(f) for f in spec.features],
            "fields": sources,
            "context": _context_doc(spec, contexts),
        }
    )


def context_hash(spec: FleetSpec) -> str:
    return _digest(_context_doc(spec, list(spec.context)))
