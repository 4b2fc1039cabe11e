"""How far a model's scores can move when its input features move: the cheap check behind the
speculation policy's "can this heartbeat change the served answer?" (docs/workers.md).

Ranks are compared in log-probability space: the order of the classes is that of log p, and
a difference log p_i - log p_j is a difference of logits, whose rate of change is of one size for
all classes (in probability space the near-zero classes that decide the top-3 set barely move
and their gaps are tiny, so one bound for all classes would say "may change" every time).
For each feature f, `s[f]` is a high quantile, over a sample of realistic inputs and over the
classes, of |d log p_k / dx_f|, measured by central finite differences on the model itself. For
a move dx of the features no log-score moves by more than about `bound = sum_f s[f] * |dx_f|`,
so the gap between two classes moves by at most 2*bound: the top-1 cannot change while the
top-1 log margin (log p1 - log p2) exceeds 2*bound, nor the top-K set while
log p_K - log p_(K+1) does. It is a first-order, quantile bound, not a proof: the
policy multiplies it by a safety factor and treats a large move (beyond the linear regime) as a
change outright; the speculation benchmark measures the agreement it actually gets.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from workers.features import CHANGE_SCALE, N_FEATURES


class ScoresModel(Protocol):
    def predict(self, features: np.ndarray) -> np.ndarray: ...


# Finite-difference step per feature, as a share of its change scale (features.CHANGE_SCALE):
# small enough to stay local, large enough to be far above float32 rounding.
_STEP_SHARE = 0.02


def estimate(model: ScoresModel, sample: np.ndarray, quantile: float = 0.5) -> np.ndarray:
    """(N_FEATURES,) float32 sensitivities of `model` around the rows of `sample`.

    One inference call of 2 * N_FEATURES * len(sample) rows (a 512-row sample: ~16k rows, a few
    milliseconds), done once per model version when it is loaded."""
    x = np.asarray(sample, dtype=np.float32)
    n, f = x.shape
    if f != N_FEATURES:
        raise ValueError(f"sample has {f} features, the model takes {N_FEATURES}")
    h = (np.asarray(CHANGE_SCALE, dtype=np.float32) * _STEP_SHARE).astype(np.float32)
    # Rows: for each feature, the sample moved +h and -h along it.
    eye = np.eye(f, dtype=np.float32) * h[:, None]
    up = (x[None, :, :] + eye[:, None, :]).reshape(f * n, f)
    down = (x[None, :, :] - eye[:, None, :]).reshape(f * n, f)
    p = _log(model.predict(np.concatenate([up, down])))
    p_up, p_down = p[: f * n].reshape(f, n, -1), p[f * n :].reshape(f, n, -1)
    rate = np.abs(p_up - p_down) / (2 * h[:, None, None])  # (f, n, classes)
    return np.quantile(rate.reshape(f, -1), quantile, axis=1).astype(np.float32)


# Probabilities below this count as this (log 1e-12 ~ -27.6): a class the model rules out.
_FLOOR = 1e-12


def _log(probs: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(probs, _FLOOR))


def margins(probs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(top-1 log margin, top-K log margin) per row: log p1 - log p2 and log p_K - log p_(K+1).
    With K or fewer classes the top-K set cannot change (margin +inf)."""
    c = probs.shape[1]
    if c < 2:
        inf = np.full(len(probs), np.inf, dtype=np.float32)
        return inf, inf
    part = -np.sort(-_log(probs), axis=1)
    m1 = (part[:, 0] - part[:, 1]).astype(np.float32)
    mk = (
        (part[:, k - 1] - part[:, k]).astype(np.float32)
        if k < c
        else np.full(len(probs), np.inf, dtype=np.float32)
    )
    return m1, mk


def score_bound(sens: np.ndarray, last_x: np.ndarray, new_x: np.ndarray) -> np.ndarray:
    """Per row: the most any class's log-score moves between `last_x` and `new_x` (first
    order)."""
    if len(new_x) == 0:
        return np.zeros(0, dtype=np.float32)
    return (np.abs(new_x - last_x) @ sens).astype(np.float32)
