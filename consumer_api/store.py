"""Newest-wins serving store (in-memory)."""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Entry:
    computed_at_ms: int
    produced_at_ms: int
    model_version: str
    body: bytes  # the PredictionSet JSON as received: the read path does no JSON work


def newer(a: Entry, b: Entry | None) -> bool:
    """True when `a` should replace `b`: later data wins; equal data time -> later production."""
    if b is None:
        return True
    return (a.computed_at_ms, a.produced_at_ms, a.model_version) > (b.computed_at_ms, b.produced_at_ms, b.model_version)


class MemoryStore:
    def __init__(self) -> None:
        self._data: dict[str, Entry] = {}
        self._lock = threading.Lock()

    def put(self, device_id: str, entry: Entry) -> bool:
        with self._lock:
            if newer(entry, self._data.get(device_id)):
                self._data[device_id] = entry
                return True
            return False

    def get(self, device_id: str) -> Entry | None:
        return self._data.get(device_id)

    def __len__(self) -> int:
        return len(self._data)
