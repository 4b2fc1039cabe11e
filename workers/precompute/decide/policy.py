"""The speculation policy: which devices to precompute now, and why. Pure and vectorized.

Rules, in priority order:
- a precompute request (API miss, prefetch hint, backfill, expiry) is always answered;
- a work order (opened/updated/closed) or an alarm that fires changes what operators will open
  next: predict;
- a heartbeat from a device never predicted here (`first_seen`), or one whose features could
  change the served answer (`heartbeat_changed`). With the model's sensitivities known
  (`workers.model.sensitivity`), "could change" means the estimated new gap between the last
  inference's top-1 and runner-up, from the feature move since that inference, falls within
  `safety` times its uncertainty; for a device somebody reads or watches (hot: recent reads,
  prefetch hints, open event streams, fed back by the read API through the read-hints topic) the
  stricter `hot_safety` applies (and with `hot_top_k`, to its top-K set too). A move of
  `max_change` or more predicts outright (beyond the estimate's linear regime). Without them it is
  the older material-change rule: max_f |x_new - x_last| / change_scale_f >= min_change (each
  feature's `change_scale` in the fleet spec);
- a heartbeat that cannot change the answer, but after which the device's *next* heartbeat would
  come too late (`event_time + expected_gap >= valid_until - refresh_lead_ms`, `expected_gap`
  being the device's last heartbeat interval, 0 when unknown, clipped to the horizon): the
  stored answer, certified unchanged by the check above, is `renewed`: published again with the
  new data's time and validity, without an inference (without the model's sensitivities: an
  inference, `refresh_before_expiry`). With validity leases (`workers.precompute.publish.lease_book`), the
  validity that counts here for a leased answer is the end of its lease terms, not its horizon:
  the leases keep it valid meanwhile, so it is renewed only that rarely;
- otherwise skip (`unchanged`); a heartbeat older than the newest one seen is `stale`.
Throttle: a device predicted less than `throttle_ms` ago (worker clock) is `throttled`: the
trigger is deferred, not dropped, and released when its window ends (see `workers.precompute.pipeline`).
`every_event` turns all of this off (every fresh heartbeat predicts): the benchmark's baseline.
"""

from __future__ import annotations

import numpy as np

from workers.model.sensitivity import Sensitivity
from workers.precompute.config import PolicyConfig
from workers.precompute.items import Reason


def material_change(last_x: np.ndarray, new_x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Per row: the largest feature move in units of each feature's change scale."""
    if len(new_x) == 0:
        return np.zeros(0, dtype=np.float32)
    return (np.abs(new_x - last_x) / scale).max(axis=1)


def decide_heartbeats(
    cfg: PolicyConfig,
    *,
    has_prediction: np.ndarray,
    last_x: np.ndarray,
    new_x: np.ndarray,
    event_time_ms: np.ndarray,
    newest_seen_ms: np.ndarray,
    valid_until_ms: np.ndarray,
    horizon_ms: int,
    change_scale: np.ndarray,
    sensitivity: Sensitivity | None = None,
    rank: np.ndarray | None = None,
    margin_top1: np.ndarray | None = None,
    margin_topk: np.ndarray | None = None,
    hot: np.ndarray | None = None,
) -> np.ndarray:
    """One decision per device's newest heartbeat of a batch (before throttling).

    `newest_seen_ms` is the event time of the newest heartbeat applied before this batch
    (-1 when none), so duplicates and out-of-order deliveries are `stale`; the gap to it is the
    interval expected until the device's next heartbeat (see `expected_gap`). `sensitivity` is
    the model's (workers.model.sensitivity.estimate); `rank` the top-(K+1) classes of each device's
    last inference and `margin_top1`/`margin_topk` its log margins (negative when unknown: then
    it predicts); `hot` whether somebody reads or watches the device."""
    n = len(new_x)
    out = np.full(n, Reason.UNCHANGED, dtype=np.int8)
    if n == 0:
        return out
    if cfg.always:
        out[:] = Reason.BACKFILL
        return out
    change = material_change(last_x, new_x, change_scale)
    if cfg.every_event:
        out[:] = Reason.HEARTBEAT_CHANGED
    else:
        gap = expected_gap(event_time_ms, newest_seen_ms, horizon_ms)
        due = event_time_ms + gap >= valid_until_ms - cfg.refresh_lead_ms
        if sensitivity is None or rank is None or margin_top1 is None or margin_topk is None:
            out[due] = Reason.REFRESH
            may_change = change >= cfg.min_change
        else:
            is_hot = np.zeros(n, dtype=bool) if hot is None else np.asarray(hot, dtype=bool)
            dx = new_x - last_x
            est, unc = sensitivity.gap_estimate(rank[:, 0], rank[:, 1], margin_top1, dx)
            may_change = est <= np.where(is_hot, cfg.hot_safety, cfg.safety) * unc
            if cfg.hot_top_k and is_hot.any():
                k = rank.shape[1] - 1
                est, unc = sensitivity.gap_estimate(rank[:, k - 1], rank[:, k], margin_topk, dx)
                may_change |= is_hot & (est <= cfg.hot_safety * unc)
            may_change |= (margin_top1 < 0) | (change >= cfg.max_change)
            out[due] = Reason.RENEWED
        out[may_change] = Reason.HEARTBEAT_CHANGED
    out[~has_prediction] = Reason.FIRST_SEEN
    out[event_time_ms <= newest_seen_ms] = Reason.STALE
    return out


def expected_gap(
    event_time_ms: np.ndarray, newest_seen_ms: np.ndarray, horizon_ms: int
) -> np.ndarray:
    """How long until each device's next heartbeat, going by its last interval: event time
    minus the previous heartbeat's (0 when there was none), clipped to 0..horizon. A device
    whose next heartbeat would land after its prediction expired is refreshed now instead, so
    the read API does not serve an expired entry (a miss) in between."""
    gap = np.where(newest_seen_ms >= 0, event_time_ms - newest_seen_ms, 0)
    return np.clip(gap, 0, horizon_ms)


def throttle(
    cfg: PolicyConfig, decisions: np.ndarray, last_predicted_ms: np.ndarray, now_ms: int
) -> np.ndarray:
    """Turn predicting decisions for devices predicted within `throttle_ms` into THROTTLED."""
    if cfg.always or cfg.throttle_ms <= 0 or len(decisions) == 0:
        return decisions
    hot = (decisions >= Reason.FIRST_SEEN) & (now_ms - last_predicted_ms < cfg.throttle_ms)
    if hot.any():
        decisions = decisions.copy()
        decisions[hot] = Reason.THROTTLED
    return decisions


def throttle_one(cfg: PolicyConfig, reason: Reason, last_predicted_ms: int, now_ms: int) -> Reason:
    if cfg.always or cfg.throttle_ms <= 0 or not reason.predicts:
        return reason
    return Reason.THROTTLED if now_ms - last_predicted_ms < cfg.throttle_ms else reason


def release_at(cfg: PolicyConfig, last_predicted_ms: int) -> int:
    """When a throttled device may be predicted again (worker clock, ms)."""
    return last_predicted_ms + cfg.throttle_ms
