"""Can a heartbeat change the served answer? The cheap check behind the speculation policy
(docs/workers.md, "The speculation trade-off").

Ranks are compared in log-probability space: the order of the classes is that of log p, and a
gap log p_i - log p_j is a difference of logits, whose rate of change has one scale for every
class (in probability space the near-zero classes that decide the top-3 set barely move and
their gaps are tiny, so any one bound would say "may change" every time).

For every ordered pair of classes (i, j) the model's *decision-boundary sensitivity* is
measured on the model itself, once per version, by central finite differences over a sample of
realistic inputs (the fleet's ground truth through the serving feature function): per feature
f, the median rate of change of the gap g_ij = log p_i - log p_j (`slope[i, j, f]`) and the 90th
percentile of how far a row's rate strays from that median (`spread[i, j, f]`), both taken over
the rows where i and j are neighbours in the ranking (top-1/top-2 or K-th/K+1-th), which is where
the question is asked. For a device whose last inference ranked i just above j with gap G, a
feature move dx gives the estimate

    G' = G + slope[i, j] . dx        with uncertainty   U = spread[i, j] . |dx|

and the ranking of i over j may have changed when G' <= safety * U. It is a first-order
estimate with a measured spread, not a proof: a move beyond the linear regime predicts outright
(`PolicyConfig.max_change`) and the speculation benchmark measures the agreement it gets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


class ScoresModel(Protocol):
    def predict(self, features: np.ndarray) -> np.ndarray: ...


# Finite-difference step per feature, as a share of its change scale (the fleet spec's):
# small enough to stay local, large enough to be far above float32 rounding.
_STEP_SHARE = 0.02
# Probabilities below this count as this (log 1e-12 ~ -27.6): a class the model rules out.
_FLOOR = 1e-12
# Fewer neighbouring rows than this for a pair: its rates are taken over all rows instead.
_MIN_ROWS = 30


@dataclass(frozen=True)
class Sensitivity:
    slope: np.ndarray  # (C, C, F) median d(log p_i - log p_j)/dx_f where i, j are neighbours
    spread: np.ndarray  # (C, C, F) 90th percentile of |rate - median| on the same rows

    def gap_estimate(
        self, i: np.ndarray, j: np.ndarray, gap: np.ndarray, dx: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(estimated new gap of class i over class j, its uncertainty) per row."""
        if len(dx) == 0:
            z = np.zeros(0, dtype=np.float32)
            return z, z
        est = gap + np.einsum("nf,nf->n", self.slope[i, j], dx)
        unc = np.einsum("nf,nf->n", self.spread[i, j], np.abs(dx))
        return est.astype(np.float32), unc.astype(np.float32)


def log_scores(probs: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(probs, _FLOOR))


def estimate(
    model: ScoresModel, sample: np.ndarray, change_scale: np.ndarray, k: int = 3
) -> Sensitivity:
    """The decision-boundary sensitivities of `model` around the rows of `sample` (one
    inference call of 2 * F * len(sample) rows: a 4,096-row sample of 16 features is ~131k rows,
    tens of milliseconds on one core), for rankings cut at top-1 and top-`k`."""
    x = np.asarray(sample, dtype=np.float32)
    n, f = x.shape
    if f != len(change_scale):
        raise ValueError(f"sample has {f} features, the spec declares {len(change_scale)}")
    h = (np.asarray(change_scale, dtype=np.float32) * _STEP_SHARE).astype(np.float32)
    eye = np.eye(f, dtype=np.float32) * h[:, None]
    up = (x[None, :, :] + eye[:, None, :]).reshape(f * n, f)
    down = (x[None, :, :] - eye[:, None, :]).reshape(f * n, f)
    lp = log_scores(model.predict(np.concatenate([up, down, x])))
    c = lp.shape[1]
    rate = (lp[: f * n] - lp[f * n : 2 * f * n]).reshape(f, n, c) / (2 * h[:, None, None])
    rate = rate.transpose(1, 0, 2)  # (rows, features, classes): d log p_c / dx_f
    order = np.argsort(-lp[2 * f * n :], axis=1, kind="stable")
    slope = np.zeros((c, c, f), dtype=np.float32)
    spread = np.zeros((c, c, f), dtype=np.float32)
    cuts = [(0, 1)] + ([(k - 1, k)] if k < c else [])
    for i in range(c):
        for j in range(c):
            if i == j:
                continue
            d = rate[:, :, i] - rate[:, :, j]
            near = np.zeros(n, dtype=bool)
            for a, b in cuts:
                near |= (order[:, a] == i) & (order[:, b] == j)
            rows = d[near] if near.sum() >= _MIN_ROWS else d
            slope[i, j] = np.median(rows, axis=0)
            spread[i, j] = np.quantile(np.abs(rows - slope[i, j]), 0.9, axis=0)
    return Sensitivity(slope, spread)


def ranking(probs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(top-(K+1) class indexes, top-1 log margin, top-K log margin) per row: the margins are
    log p1 - log p2 and log p_K - log p_(K+1). With K or fewer classes the top-K set cannot
    change (margin +inf, and the K+1-th index repeats the K-th)."""
    n, c = probs.shape
    lp = log_scores(probs)
    order = np.argsort(-lp, axis=1, kind="stable")[:, : min(k + 1, c)]
    if order.shape[1] < k + 1:
        order = np.concatenate([order, order[:, -1:].repeat(k + 1 - order.shape[1], 1)], 1)
    r = np.arange(n)
    m1 = (lp[r, order[:, 0]] - lp[r, order[:, 1]]) if c > 1 else np.full(n, np.inf)
    mk = lp[r, order[:, k - 1]] - lp[r, order[:, k]] if k < c else np.full(n, np.inf)
    return order, m1.astype(np.float32), mk.astype(np.float32)
