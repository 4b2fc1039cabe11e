"""A drift profile: a fleet-wide change of the hidden conditions, so a model trained before it
goes stale and a model retrained from the outcomes after it can be told apart (the `learn`
benchmark, `precast-simulator --drift-profile shift`).

From simulated second `at_s` on, each device switches at its own moment within `ramp_s`:
- the **mix** changes: a share `mix` of the devices moves into a condition drawn from a new
  prevalence (the fleet's normal state, the first condition, half as common; the faults in
  reverse order of their old prevalence);
- the **signatures** change: the faulty conditions' heartbeat distributions rotate (condition k
  now reads like condition k+1 did, the last like the first fault), while each keeps its label
  and its event rates. A model that learnt "these readings mean that fault" is now wrong for
  every faulty device; its work orders' resolutions say what is right.

Drawn from its own generator (`[seed, 5]`), so a fleet with a profile sends the same events as
one without until the first device switches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DriftProfile:
    at_s: float = 600.0
    ramp_s: float = 300.0
    mix: float = 0.3
    signatures: bool = True

    def __post_init__(self) -> None:
        if self.at_s < 0 or self.ramp_s < 0 or not 0 <= self.mix <= 1:
            raise ValueError("a drift profile needs at_s >= 0, ramp_s >= 0 and 0 <= mix <= 1")


@dataclass(frozen=True)
class CompiledDrift:
    switch_s: np.ndarray  # simulated second each device switches at
    after: np.ndarray  # each device's condition after its switch
    signature: np.ndarray  # condition -> the condition whose readings it shows after the switch


def new_prevalence(prevalence: np.ndarray) -> np.ndarray:
    """The mix after a shift: the normal state half as common, the faults' shares reversed."""
    p: np.ndarray = np.asarray(prevalence, dtype=np.float64) / np.sum(prevalence)
    if len(p) < 2:
        return p
    out: np.ndarray = np.empty_like(p)
    out[0] = p[0] / 2
    faults = p[1:][::-1]
    out[1:] = faults / faults.sum() * (1 - out[0])
    return out


def rotation(k: int) -> np.ndarray:
    """Condition -> whose heartbeat signature it shows: faults rotate, the first stays."""
    if k < 3:
        return np.arange(k)
    return np.array([0, *(1 + (c % (k - 1)) for c in range(1, k))], dtype=np.int64)


def compile_drift(
    profile: DriftProfile, conditions: np.ndarray, prevalence: np.ndarray, seed: int
) -> CompiledDrift:
    rng = np.random.default_rng([seed, 5])
    n, k = len(conditions), len(prevalence)
    switch = profile.at_s + rng.random(n) * profile.ramp_s
    moves = rng.random(n) < profile.mix
    drawn = rng.choice(k, size=n, p=new_prevalence(prevalence))
    after = np.where(moves, drawn, conditions).astype(np.int64)
    signature = rotation(k) if profile.signatures else np.arange(k)
    return CompiledDrift(switch, after, signature)
