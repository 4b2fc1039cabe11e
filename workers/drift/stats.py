"""Two-sample Kolmogorov–Smirnov per feature, Benjamini–Hochberg across features, and an
effect-size floor. Pure numpy, no I/O (the drift monitor and its benchmark share it).

Why not scipy.stats.ks_2samp: it tests one feature per call and re-sorts the reference every
time; here the reference is sorted once per model version and every feature of a window is
tested in one pass (`bench drift` measures both side by side). The p-value is the asymptotic
two-sample one (Kolmogorov's limit distribution at sqrt(nm/(n+m))·D), which is what scipy
uses for samples this large; for discrete features (one-hot device type, firmware flag) it is
conservative, i.e. it errs towards not alarming.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Terms of Kolmogorov's alternating series: at the smallest argument evaluated (0.2) the
# 100th term is exp(-800), far below float precision.
_K = np.arange(1, 101, dtype=np.float64)
_SIGN = np.where(_K % 2 == 1, 1.0, -1.0)


def ks_statistics(reference_sorted: np.ndarray, window: np.ndarray) -> np.ndarray:
    """D per feature: sup |F_ref - F_window| (reference (k, m), each row sorted; window (n, k))."""
    k, m = reference_sorted.shape
    n = window.shape[0]
    if window.shape[1] != k:
        raise ValueError(f"window has {window.shape[1]} features, the reference {k}")
    cols = np.sort(np.ascontiguousarray(window.T), axis=1)  # (k, n), one sort per feature
    d = np.empty(k, dtype=np.float64)
    for j in range(k):
        ref, win = reference_sorted[j], cols[j]
        # Both empirical CDFs are step functions that only jump at sample points, so the
        # supremum is reached at one of them ("right" counts ties, which discrete features have).
        points = np.concatenate((ref, win))
        diff = np.searchsorted(ref, points, side="right") / m
        diff -= np.searchsorted(win, points, side="right") / n
        d[j] = np.abs(diff).max()
    return d


def kolmogorov_sf(x: np.ndarray) -> np.ndarray:
    """P(K > x) for Kolmogorov's limit distribution (scipy's `kstwobign.sf`)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.ones_like(x)
    big = x >= 0.2  # below, the survival function is 1 to within 1e-20
    if big.any():
        xb = x[big][:, None]
        out[big] = 2.0 * (_SIGN * np.exp(-2.0 * _K**2 * xb**2)).sum(axis=1)
    return np.clip(out, 0.0, 1.0)


def ks_pvalues(d: np.ndarray, n: int, m: int) -> np.ndarray:
    """Asymptotic two-sided p-values of two-sample KS statistics for sample sizes n and m."""
    return kolmogorov_sf(np.sqrt(n * m / (n + m)) * np.asarray(d, dtype=np.float64))


def benjamini_hochberg(p: np.ndarray, alpha: float) -> np.ndarray:
    """Which hypotheses BH rejects at false discovery rate alpha (a boolean mask)."""
    p = np.asarray(p, dtype=np.float64)
    k = len(p)
    order = np.argsort(p, kind="stable")
    below = p[order] <= alpha * np.arange(1, k + 1) / k
    rejected = np.zeros(k, dtype=bool)
    if below.any():
        last = int(np.flatnonzero(below)[-1])
        rejected[order[: last + 1]] = True
    return rejected


@dataclass(frozen=True)
class DriftResult:
    statistic: np.ndarray  # D per feature
    p_value: np.ndarray
    flagged: np.ndarray  # BH-rejected and D > min_effect
    window: int  # rows in the window
    reference: int  # rows in the reference

    @property
    def drifted(self) -> bool:
        return bool(self.flagged.any())


def test_window(
    reference_sorted: np.ndarray, window: np.ndarray, *, alpha: float, min_effect: float
) -> DriftResult:
    """KS per feature, BH across features at alpha, and flag only features whose distance
    also exceeds `min_effect`: with tens of thousands of rows a window rejects on differences
    too small to matter (fleet composition, telemetry rounding)."""
    d = ks_statistics(reference_sorted, window)
    n, m = window.shape[0], reference_sorted.shape[1]
    p = ks_pvalues(d, n, m)
    flagged = benjamini_hochberg(p, alpha) & (d > min_effect)
    return DriftResult(d, p, flagged, n, m)


test_window.__test__ = False  # type: ignore[attr-defined]  # a function, not a pytest test
