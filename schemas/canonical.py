"""The wire form of a normalized event (the inverse of `schemas.wire`): every field at its first
declared path (the canonical form precast's producers send), or in a tolerated variant for the
simulator (`path:N` puts fields that have alternatives at their N-th path; `numbers_as_text`
sends numeric leaves as JSON number text). Times go out in each path's declared unit."""

from __future__ import annotations

from typing import Any

from schemas.spec.fields import Attribute, Metric, Stream, WirePath


def _put(doc: dict[str, Any], path: WirePath, value: Any) -> None:
    node = doc
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value


def _pick(paths: tuple[WirePath, ...], alternative: int) -> WirePath:
    return paths[alternative] if alternative < len(paths) else paths[0]


def _text(x: Any) -> str:
    return repr(float(x)) if isinstance(x, float) else str(x)


class StreamWriter:
    """Wire dicts of one stream's events; `schema_version` and `kind` come from the spec."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        env = stream.envelope
        self._version = env.schema_version.supported[-1] if env.schema_version else None
        self._numeric = {
            name
            for name, f in stream.fields.items()
            if isinstance(f, Metric) or (isinstance(f, Attribute) and f.type != "string")
        }

    def write(
        self, event: dict[str, Any], alternative: int = 0, numbers_as_text: bool = False
    ) -> dict[str, Any]:
        """The wire dict of `event` (a normalized event: envelope keys and field names)."""
        env = self.stream.envelope
        doc: dict[str, Any] = {}
        if env.schema_version is not None and self._version is not None:
            _put(doc, env.schema_version.path[0], self._version)
        if env.event_id is not None:
            _put(doc, env.event_id[0], event["event_id"])
        if env.kind is not None:
            _put(doc, env.kind.path[0], env.kind.value)
        _put(doc, env.device_id[0], event["device_id"])
        for ref, key in ((env.event_time, "event_time_ms"), (env.produced_at, "produced_at_ms")):
            if ref is None or event.get(key) is None:
                continue
            ms = int(event[key])
            _put(doc, ref.path[0], ms if ref.unit == "ms" else ms / 1000)
        for name, f in self.stream.fields.items():
            v = event.get(name)
            if v is None:
                continue
            if numbers_as_text and name in self._numeric:
                v = _text(v)
            _put(doc, _pick(f.path, alternative), v)
        return doc
