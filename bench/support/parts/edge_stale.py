"""`python -m bench edge`: what "stale through the edge" means, kept apart from the I/O so a unit
test can hold it. An answer is ordered by (computed_at_ms, produced_at_ms), as newest-wins orders
it in the store; the edge's answer is stale when a newer one had been seen at the origin more
than the bound (docs: 1 s after a replica stored it) before the edge was asked."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

Version = tuple[int, int]  # (computed_at_ms, produced_at_ms)


@dataclass
class StaleCounter:
    bound_s: float
    # per device: versions seen at the origin, with when each was first seen (monotonic s)
    seen: dict[str, dict[Version, float]] = field(default_factory=dict)
    reads: int = 0
    stale: int = 0
    worst_s: float = 0.0  # how long the newest missed answer had been at the origin

    def origin(self, device: str, version: Version, at_s: float) -> None:
        """An answer the origin (the API replica) served: it had stored it by `at_s`."""
        self.seen.setdefault(device, {}).setdefault(version, at_s)

    def edge(self, device: str, version: Version, asked_s: float) -> bool:
        """An answer served through the edge to a request sent at `asked_s`; True if stale."""
        self.reads += 1
        newer = [t for v, t in self.seen.get(device, {}).items() if v > version]
        late = [asked_s - t for t in newer if asked_s - t > self.bound_s]
        if late:
            self.stale += 1
            self.worst_s = max(self.worst_s, max(late))
            return True
        return False


def zipf_devices(n_devices: int, n: int, s: float = 1.1, seed: int = 7) -> list[int]:
    """Indices of `n` reads over `n_devices` with Zipf(s) popularity, popularity unrelated to
    the index (a shuffled rank), like the read API benchmark's UI pattern."""
    rng = np.random.default_rng(seed)
    p = np.arange(1, n_devices + 1, dtype=np.float64) ** -s
    picks = rng.choice(n_devices, size=n, p=p / p.sum())
    order = rng.permutation(n_devices)
    return [int(order[i]) for i in picks]


def p99(values: list[float]) -> float:
    if not values:
        raise ValueError("no values")
    return float(np.percentile(values, 99))
