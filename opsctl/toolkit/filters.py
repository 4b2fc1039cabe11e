"""Which records of a range an SRE command keeps: by device, event type, schema version, time.

Pure: a record is judged from its key, value and timestamp. The payload is parsed only when a
filter needs a payload field, so an unfiltered replay pays nothing per record here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import orjson

from opsctl.toolkit.ranges import TimeRange
from precast.errors import ConfigError
from schemas.events import DEVICE_ID_PATTERN
from schemas.spec import FleetSpec, load_spec
from schemas.spec.fields import WirePath


def declared_event_types(spec: FleetSpec) -> dict[str, tuple[WirePath, str]]:
    """Event type -> (where a record says it, the value): the `kind` each stream declares."""
    return {
        s.envelope.kind.value: (s.envelope.kind.path[0], s.envelope.kind.value)
        for s in spec.streams.values()
        if s.envelope.kind
    }


def _at(doc: object, path: WirePath) -> object:
    for k in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(k)
    return doc


def split_list(values: Iterable[str] | None) -> list[str]:
    """Repeatable, comma-separated flag values as one flat list."""
    return [v.strip() for item in (values or []) for v in item.split(",") if v.strip()]


@dataclass(frozen=True)
class RecordFilter:
    device_ids: frozenset[bytes] = frozenset()
    event_types: frozenset[str] = frozenset()
    schema_versions: frozenset[int] = frozenset()
    time_range: TimeRange | None = None
    # where records carry their type and schema version (the fleet spec's envelope)
    kind_path: WirePath = ("kind",)
    version_path: WirePath = ("schema_version",)

    @classmethod
    def from_args(
        cls,
        devices: Iterable[str] | None = None,
        event_types: Iterable[str] | None = None,
        schema_versions: Iterable[str] | None = None,
        time_range: TimeRange | None = None,
        spec: FleetSpec | None = None,
    ) -> RecordFilter:
        import re

        devs = split_list(devices)
        bad = [d for d in devs if not re.match(DEVICE_ID_PATTERN, d)]
        if bad:
            raise ConfigError(f"malformed device ID {bad[0]!r} (expected {DEVICE_ID_PATTERN})")
        spec = spec or load_spec()
        types = declared_event_types(spec)
        kinds = split_list(event_types)
        unknown = [k for k in kinds if k not in types]
        if unknown:
            known = ", ".join(types) or "none: the fleet spec's streams declare no kind"
            raise ConfigError(f"unknown event type {unknown[0]!r}: known are {known}")
        paths = {types[k][0] for k in kinds}
        if len(paths) > 1:
            raise ConfigError("these event types are told apart at different paths: one at a time")
        versions_at = {
            s.envelope.schema_version.path[0]
            for s in spec.streams.values()
            if s.envelope.schema_version
        }
        versions = []
        for v in split_list(schema_versions):
            if not v.isdigit():
                raise ConfigError(
                    f"malformed schema version {v!r}: expected a whole number, e.g. 1"
                )
            versions.append(int(v))
        if versions and not versions_at:
            raise ConfigError("the fleet spec's streams carry no schema version to filter on")
        return cls(
            frozenset(d.encode() for d in devs),
            frozenset(kinds),
            frozenset(versions),
            time_range,
            next(iter(paths), ("kind",)),
            next(iter(versions_at), ("schema_version",)),
        )

    @property
    def needs_payload(self) -> bool:
        return bool(self.event_types or self.schema_versions)

    @property
    def is_open(self) -> bool:
        """True when every record passes (the replay's fast path)."""
        return not (self.device_ids or self.needs_payload or self.time_range)

    def matches(self, key: bytes | None, value: bytes | None, ts_ms: int) -> bool:
        if self.time_range is not None and not self.time_range.contains(ts_ms):
            return False
        if self.device_ids and key not in self.device_ids:
            return False
        if not self.needs_payload:
            return True
        try:  # whatever the payload holds: a record the filter cannot read does not match
            doc = orjson.loads(value) if value else None
            if not isinstance(doc, dict):
                return False
            if self.event_types and _at(doc, self.kind_path) not in self.event_types:
                return False  # (a list or an object there is unhashable: TypeError below)
            return not (
                self.schema_versions and _at(doc, self.version_path) not in self.schema_versions
            )
        except (orjson.JSONDecodeError, TypeError):
            return False

    def describe(self) -> dict[str, object]:
        return {
            "devices": sorted(d.decode() for d in self.device_ids),
            "event_types": sorted(self.event_types),
            "schema_versions": sorted(self.schema_versions),
            "time_range": None
            if self.time_range is None
            else [self.time_range.start_ms, self.time_range.end_ms],
        }
