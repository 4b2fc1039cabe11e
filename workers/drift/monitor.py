"""The drift monitor's core: heartbeat records -> the serving feature function -> a sliding
window -> KS per feature against the model's frozen reference, BH across features, an effect
floor -> Prometheus gauges. No Kafka here: `workers.drift.cli` feeds it, `bench drift` too."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np
from prometheus_client import Counter, Gauge, Histogram

from precast.fleet import Fleet, load_fleet
from precast.guard import Guard, Unusable
from precast.kafka import KafkaMessage
from schemas.deadletters import Reason
from workers.drift.reference import Reference
from workers.drift.stats import DriftResult, test_window
from workers.drift.window import SlidingWindow
from workers.precompute.ingest.decode import Decoder
from workers.precompute.ingest.heartbeats import guarded_heartbeats

STATISTIC = Gauge(
    "precast_drift_ks_statistic", "KS distance D of the last tested window, by feature", ["feature"]
)
P_VALUE = Gauge("precast_drift_p_value", "KS p-value of the last tested window", ["feature"])
WINDOW_ROWS = Gauge(
    "precast_drift_window_rows", "live rows in the last tested window, by feature", ["feature"]
)
FEATURE_FLAGGED = Gauge(
    "precast_drift_feature_flagged", "1 if the feature drifted in the last window", ["feature"]
)
FLAGGED = Gauge("precast_drift_flagged_features", "features flagged in the last tested window")
WINDOWS = Counter("precast_drift_windows_total", "windows evaluated", ["result"])
HEARTBEATS = Counter("precast_drift_heartbeats_total", "heartbeats read", ["result"])
VALUES = Counter("precast_drift_values_total", "feature values tested (rows x features)")
EVAL_S = Histogram(
    "precast_drift_evaluation_seconds",
    "time to test one window",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
REFERENCE = Gauge(
    "precast_drift_reference_info", "the reference in use (value 1)", ["model_version"]
)
for _r in ("clean", "drift", "too_small"):  # series exist from the start: zeros, not gaps
    WINDOWS.labels(_r)
for _r in ("ok", "rejected"):
    HEARTBEATS.labels(_r)


def monitored_features(fleet: Fleet, cols: np.ndarray) -> np.ndarray:
    """(n, k) monitored features from heartbeat state columns (`Heartbeats.cols`), through the
    same feature matrix the worker and training use (context values: a device without any;
    the monitored columns do not read them)."""
    n = len(cols)
    context = fleet.context.columns([None] * n, np.zeros(n, dtype=np.int64))
    x = fleet.features.build(cols, context)
    return x[:, fleet.features.heartbeat_columns].astype(np.float64)


log = logging.getLogger("precast.drift")
# Bad records are the worker's to dead-letter; the monitor counts them and logs (bounded).
GUARD = Guard("drift", log)


def _ignore(msg: KafkaMessage, reason: Reason, detail: str) -> None:
    HEARTBEATS.labels("rejected").inc()
    GUARD.reject(Unusable(reason, detail), msg)


class DriftMonitor:
    def __init__(
        self,
        reference: Reference,
        *,
        window_s: float,
        step_s: float,
        min_rows: int,
        max_rows: int,
        alpha: float,
        min_effect: float,
        fleet: Fleet | None = None,
    ) -> None:
        self.fleet = fleet or load_fleet()
        self.decoder = Decoder(self.fleet)
        self.ref = reference
        self.window = SlidingWindow(window_s, max_rows)
        self.step_s, self.min_rows = step_s, min_rows
        self.alpha, self.min_effect = alpha, min_effect
        self.next_test: float | None = None
        self.last: DriftResult | None = None
        REFERENCE.labels(reference.model_version).set(1)

    def add_records(self, msgs: Sequence[KafkaMessage], now_s: float) -> None:
        """A consumed batch; `now_s` (arrival time) places it in the window: device clocks do
        not decide which window a record belongs to."""
        hb = guarded_heartbeats(self.decoder, GUARD, msgs, _ignore)
        HEARTBEATS.labels("ok").inc(len(hb))
        self.add_rows(np.full(len(hb), now_s), monitored_features(self.fleet, hb.cols))

    def add_rows(self, times: np.ndarray, rows: np.ndarray) -> None:
        self.window.add(times, rows)

    def due(self, now_s: float) -> bool:
        if self.next_test is None:
            self.next_test = now_s + self.step_s
        return now_s >= self.next_test

    def evaluate(self, now_s: float) -> DriftResult | None:
        """Test the window now; None (and a too_small count) if it holds too few rows."""
        self.next_test = now_s + self.step_s
        rows = self.window.rows()
        if len(rows) < self.min_rows:
            WINDOWS.labels("too_small").inc()
            return None
        t0 = time.perf_counter()
        r = test_window(self.ref.sorted_values, rows, alpha=self.alpha, min_effect=self.min_effect)
        EVAL_S.observe(time.perf_counter() - t0)
        VALUES.inc(rows.size)
        for i, name in enumerate(self.ref.features):
            STATISTIC.labels(name).set(float(r.statistic[i]))
            P_VALUE.labels(name).set(float(r.p_value[i]))
            WINDOW_ROWS.labels(name).set(r.window)
            FEATURE_FLAGGED.labels(name).set(float(r.flagged[i]))
        FLAGGED.set(int(r.flagged.sum()))
        WINDOWS.labels("drift" if r.drifted else "clean").inc()
        self.last = r
        return r
