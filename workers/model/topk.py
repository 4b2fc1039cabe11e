"""Top-K selection over a batch of class probabilities, vectorized."""

from __future__ import annotations

import numpy as np


def top_k(probs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices, scores), each (n, k), best first. Ties keep the lower class index first."""
    n, c = probs.shape
    k = min(k, c)
    part = (
        np.broadcast_to(np.arange(c), (n, c))
        if k == c
        else np.argpartition(-probs, k - 1, axis=1)[:, :k]
    )
    part_scores = np.take_along_axis(probs, part, axis=1)
    # Stable sort on (-score, index) so equal scores come out in a deterministic order.
    order = np.lexsort((part, -part_scores), axis=1)
    idx = np.take_along_axis(part, order, axis=1)
    return idx, np.take_along_axis(probs, idx, axis=1)
