"""Counts made in a helper process, added to the same counters of the process that serves
`/metrics` (the read API's gate process counts what it rejects; its parent exports it).

The helper sends `deltas()` (what each labelled child grew by since the last call) with its
messages; the parent `add`s them. Only counters: a gauge of another process means nothing here.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter

Deltas = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class CounterRelay:
    def __init__(self, counters: Iterable[Counter]) -> None:
        self._by_name = {metric.name: c for c in counters for metric in c.collect()}
        self._sent: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def deltas(self) -> Deltas:
        """What grew since the last call (the helper's side)."""
        out: Deltas = {}
        for name, counter in self._by_name.items():
            for metric in counter.collect():
                for s in metric.samples:
                    if not s.name.endswith("_total"):
                        continue  # `_created` samples: this process's, not the parent's
                    key = (name, tuple(sorted(s.labels.items())))
                    grew = s.value - self._sent.get(key, 0.0)
                    if grew > 0:
                        out[key] = grew
                        self._sent[key] = s.value
        return out

    def add(self, deltas: Deltas) -> None:
        """Add a helper's deltas to this process's counters (the parent's side); names this
        process does not relay are ignored."""
        for (name, labels), grew in deltas.items():
            counter = self._by_name.get(name)
            if counter is None or grew <= 0:
                continue
            (counter.labels(**dict(labels)) if labels else counter).inc(grew)
