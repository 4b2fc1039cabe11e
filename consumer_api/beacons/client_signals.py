"""The UI's beacons aggregated into the two measures of precast.telemetry.objectives, per client.

Trust model (docs/api.md): a beacon is a claim by one client, so each client (its address, or
its token when there is no address) keeps its own decayed figures — more beacons only refine
that client's own, never weigh more — and what is published is taken over clients:

- shares of the wait and of the age by origin, and the wait per view by origin: the median over
  clients (shares renormalized to sum to 1), so a minority of clients cannot move them;
- p95 of the wait and of the age: the quantile of the clients' distributions averaged with one
  weight per client (each client's decayed histogram normalized), so a client that is a
  fraction f of the clients moves the quantile's level by at most f.

Clients silent for ten half-lives drop out; with none left nothing is published (no series),
so "no one was looking" never reads as a low baseline. A minute-by-minute history of the wait
figures lets the board's banner apply the alert's own rule (`Signals.banner`).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from precast.telemetry.objectives import (
    AGE_OBJECTIVE_S,
    AGE_ORIGINS,
    BASELINE_S,
    BOUNDS_MS,
    QUANTILE,
    RECENT_S,
    SHARE_THRESHOLD,
    WAIT_OBJECTIVE_S,
    WAIT_ORIGINS,
    rising,
)

_NW, _NA, _NB = len(WAIT_ORIGINS), len(AGE_ORIGINS), len(BOUNDS_MS) + 1
# One client's figures in one float32 vector (about 360 bytes with numpy's header):
# [views, aged views, wait ms by origin, age ms by origin, wait histogram, age histogram]
_W = slice(2, 2 + _NW)
_A = slice(_W.stop, _W.stop + _NA)
_WH = slice(_A.stop, _A.stop + _NB)
_AH = slice(_WH.stop, _WH.stop + _NB)
_LEN = _AH.stop
_BOUNDS = np.asarray(BOUNDS_MS)
_HISTORY_EVERY_S = 60.0


@dataclass(frozen=True)
class Snapshot:
    """What is published: `clients` live clients (at least one), shares that sum to 1 (or are
    all 0), the median wait per view by origin (seconds) and the two p95s (seconds; the age's
    is None when no live client was shown an answer with data)."""

    clients: int
    wait_shares: dict[str, float]
    age_shares: dict[str, float]
    wait_per_view_s: dict[str, float]
    wait_p95_s: float
    age_p95_s: float | None


class _Client:
    __slots__ = ("at", "v")

    def __init__(self, at: float) -> None:
        self.v = np.zeros(_LEN, dtype=np.float32)
        self.at = at


def _median_shares(rows: np.ndarray) -> np.ndarray:
    totals = rows.sum(axis=1)
    rows = rows[totals > 0]
    if not len(rows):
        return np.zeros(rows.shape[1])
    med = np.median(rows / rows.sum(axis=1, keepdims=True), axis=0)
    total = med.sum()
    return med / total if total > 0 else med


def _named(origins: tuple[str, ...], shares: np.ndarray) -> dict[str, float]:
    # Six decimals: the figures are kept in float32, more digits would only be noise.
    return {o: round(float(v), 6) for o, v in zip(origins, shares, strict=True)}


def quantile_ms(hists: np.ndarray, q: float = QUANTILE) -> float | None:
    """The q-quantile (ms) of the clients' histograms averaged with one weight per client,
    interpolated inside its bucket; None without any observation."""
    totals = hists.sum(axis=1)
    hists = hists[totals > 0]
    if not len(hists):
        return None
    mix = (hists / hists.sum(axis=1, keepdims=True)).mean(axis=0)
    cdf = np.cumsum(mix)
    i = min(int(np.searchsorted(cdf, q - 1e-9)), _NB - 1)
    if i == _NB - 1:  # above the last bound: values are clipped there
        return float(_BOUNDS[-1])
    lo = 0.0 if i == 0 else float(_BOUNDS[i - 1])
    below = 0.0 if i == 0 else float(cdf[i - 1])
    frac = (q - below) / float(mix[i]) if mix[i] > 0 else 1.0
    return lo + min(max(frac, 0.0), 1.0) * (float(_BOUNDS[i]) - lo)


class Signals:
    def __init__(
        self,
        half_life_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 100_000,
    ) -> None:
        self._k = math.log(2) / half_life_s
        self._horizon = 10 * half_life_s
        self._clock = clock
        self._max = max_clients
        self._clients: OrderedDict[str, _Client] = OrderedDict()
        self._lock = threading.Lock()
        keep = int((RECENT_S + BASELINE_S) / _HISTORY_EVERY_S) + 2
        self._history: deque[tuple[float, np.ndarray, np.ndarray, float]] = deque(maxlen=keep)

    def add(
        self, wait: Mapping[str, float], age: Mapping[str, float] | None, client: str = "-"
    ) -> None:
        """One view: its wait by origin (ms) and, when the answer had data, its age by origin."""
        row = np.zeros(_LEN, dtype=np.float32)
        row[0] = 1.0
        row[_W] = [wait.get(o, 0.0) for o in WAIT_ORIGINS]
        row[_WH.start + int(np.searchsorted(_BOUNDS, float(row[_W].sum())))] = 1.0
        if age is not None:
            row[1] = 1.0
            row[_A] = [age.get(o, 0.0) for o in AGE_ORIGINS]
            row[_AH.start + int(np.searchsorted(_BOUNDS, float(row[_A].sum())))] = 1.0
        with self._lock:
            now = self._clock()
            c = self._clients.get(client)
            if c is None:
                c = self._clients[client] = _Client(now)
                if len(self._clients) > self._max:
                    self._clients.popitem(last=False)
            else:
                self._clients.move_to_end(client)
            c.v = c.v * np.float32(math.exp(-self._k * (now - c.at))) + row
            c.at = now

    def snapshot(self) -> Snapshot | None:
        """The published figures now, or None when no client is live. Also keeps the history
        the banner compares with (one entry a minute while there are clients)."""
        with self._lock:
            now = self._clock()
            while self._clients:  # oldest first: drop those past the horizon
                if now - next(iter(self._clients.values())).at <= self._horizon:
                    break
                self._clients.popitem(last=False)
            if not self._clients:
                return None
            rows = np.vstack([c.v for c in self._clients.values()]).astype(np.float64)
        wait_shares = _median_shares(rows[:, _W])
        per_view = np.median(rows[:, _W] / np.maximum(rows[:, :1], 1e-12), axis=0) / 1000
        wait_p95 = quantile_ms(rows[:, _WH]) or 0.0
        age_p95 = quantile_ms(rows[:, _AH])
        snap = Snapshot(
            clients=len(rows),
            wait_shares=_named(WAIT_ORIGINS, wait_shares),
            age_shares=_named(AGE_ORIGINS, _median_shares(rows[:, _A])),
            wait_per_view_s=dict(zip(WAIT_ORIGINS, map(float, per_view), strict=True)),
            wait_p95_s=wait_p95 / 1000,
            age_p95_s=None if age_p95 is None else age_p95 / 1000,
        )
        with self._lock:
            if not self._history or now - self._history[-1][0] >= _HISTORY_EVERY_S:
                self._history.append((now, wait_shares, per_view, snap.wait_p95_s))
        return snap

    def banner(self, snap: Snapshot | None) -> dict[str, Any] | None:
        """The alert's rule (precast.telemetry.objectives) on this replica's history: the origin whose wait
        share rose past the threshold while the wait's p95 is past its objective, or None."""
        if snap is None:
            return None
        with self._lock:
            history = list(self._history)
        now = self._clock()
        recent = [h for h in history if now - h[0] < RECENT_S]
        base = [h for h in history if RECENT_S <= now - h[0] < RECENT_S + BASELINE_S]
        if not base:
            return None
        cur_shares = np.mean([h[1] for h in recent] or [np.zeros(_NW)], axis=0)
        cur_view = np.mean([h[2] for h in recent] or [np.zeros(_NW)], axis=0)
        cur_p95 = float(np.mean([h[3] for h in recent])) if recent else 0.0
        base_shares = np.mean([h[1] for h in base], axis=0)
        base_view = np.mean([h[2] for h in base], axis=0)
        if cur_p95 <= WAIT_OBJECTIVE_S:
            return None
        hits = [
            i
            for i in range(_NW)
            if rising(cur_shares[i], base_shares[i], cur_view[i], base_view[i])
        ]
        if not hits:
            return None
        i = max(hits, key=lambda j: cur_shares[j])
        return {
            "origin": WAIT_ORIGINS[i],
            "share": float(cur_shares[i]),
            "baseline_share": float(base_shares[i]),
            "threshold": SHARE_THRESHOLD,
            "wait_p95_ms": round(cur_p95 * 1000, 1),
            "objective_ms": WAIT_OBJECTIVE_S * 1000,
        }


def measures(snap: Snapshot | None) -> dict[str, Any]:
    """The board panel's two figures: `wait` and `age`, each with its p95 and objective (ms) and
    its shares by origin; figures are None while no client is live."""

    def ms(s: float | None) -> float | None:
        return None if s is None else round(s * 1000, 1)

    return {
        "wait": {
            "p95_ms": ms(snap.wait_p95_s) if snap else None,
            "objective_ms": WAIT_OBJECTIVE_S * 1000,
            "shares": snap.wait_shares if snap else None,
            "per_view_ms": {o: ms(v) for o, v in snap.wait_per_view_s.items()} if snap else None,
            "clients": snap.clients if snap else 0,
        },
        "age": {
            "p95_ms": ms(snap.age_p95_s) if snap else None,
            "objective_ms": AGE_OBJECTIVE_S * 1000,
            "shares": snap.age_shares if snap else None,
        },
    }
