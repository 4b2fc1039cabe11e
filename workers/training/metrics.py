"""Holdout metrics of a classifier's probabilities: top-1 and top-3 accuracy, F1 per label,
macro F1, and calibration (expected calibration error over 10 bins of top-1 confidence, with
the bins' confidence and accuracy so a reliability plot can be drawn from them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def holdout_metrics(probs: np.ndarray, y: np.ndarray, labels: Sequence[str]) -> dict[str, Any]:
    pred = probs.argmax(axis=1)
    k = min(3, probs.shape[1])
    topk = np.argsort(-probs, axis=1)[:, :k]
    f1 = {}
    for i, label in enumerate(labels):
        tp = int(((pred == i) & (y == i)).sum())
        fp = int(((pred == i) & (y != i)).sum())
        fn = int(((pred != i) & (y == i)).sum())
        f1[label] = round(2 * tp / max(1, 2 * tp + fp + fn), 4)
    return {
        "samples": len(y),
        "accuracy": round(float((pred == y).mean()), 4) if len(y) else 0.0,
        "top3_accuracy": round(float((topk == y[:, None]).any(axis=1).mean()), 4)
        if len(y)
        else 0.0,
        "macro_f1": round(float(np.mean(list(f1.values()))), 4),
        "f1": f1,
        "calibration": calibration(probs, y),
    }


def calibration(probs: np.ndarray, y: np.ndarray, bins: int = 10) -> dict[str, Any]:
    conf = probs.max(axis=1)
    hit = probs.argmax(axis=1) == y
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(conf, edges[1:-1]), 0, bins - 1)
    table, ece = [], 0.0
    for b in range(bins):
        sel = which == b
        if not sel.any():
            continue
        c, a = float(conf[sel].mean()), float(hit[sel].mean())
        ece += abs(c - a) * sel.mean()
        table.append(
            {
                "bin": [round(edges[b], 2), round(edges[b + 1], 2)],
                "confidence": round(c, 4),
                "accuracy": round(a, 4),
                "rows": int(sel.sum()),
            }
        )
    return {"ece": round(float(ece), 4), "bins": table}
