"""The pipeline's shared work-item types: `Reason` (the kind of a trigger and of a policy
decision), `Pending` (a device waiting for a prediction, with the input records it answers) and
`merge` (two triggers of one device become one). Every stage hands these along: ingest makes
them, the policy decides on their kind, scoring encodes them, leases lapse them."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from itertools import islice

from precast.kafka import KafkaMessage


class Reason(IntEnum):
    """Decision codes (an int8 array on the hot path); `.label` names them in metrics."""

    UNCHANGED = 0
    STALE = 1
    THROTTLED = 2
    CONTEXT_ONLY = 3  # a cleared/info alarm: context updated, nothing to precompute
    RENEWED = 4  # the stored answer is published again with new validity; no inference
    LAPSED = 5  # its device stopped sending: published once more, without lease terms
    FIRST_SEEN = 10
    HEARTBEAT_CHANGED = 11
    REFRESH = 12
    WORK_ORDER = 13
    ALARM = 14
    API_MISS = 20
    PREFETCH = 21
    BACKFILL = 22
    EXPIRY_REQUEST = 23

    @property
    def label(self) -> str:
        return _LABELS[self]

    @property
    def predicts(self) -> bool:
        return self >= Reason.FIRST_SEEN

    @property
    def emits(self) -> bool:
        """A record is published: a prediction, or a renewal of the stored one."""
        return self >= Reason.FIRST_SEEN or self in (Reason.RENEWED, Reason.LAPSED)

    @property
    def republishes(self) -> bool:
        """The stored answer is published again without an inference."""
        return self in (Reason.RENEWED, Reason.LAPSED)


_LABELS = {
    Reason.UNCHANGED: "unchanged",
    Reason.STALE: "stale",
    Reason.THROTTLED: "throttled",
    Reason.CONTEXT_ONLY: "context_only",
    Reason.RENEWED: "renewed",
    Reason.LAPSED: "lapsed",
    Reason.FIRST_SEEN: "first_seen",
    Reason.HEARTBEAT_CHANGED: "heartbeat_changed",
    Reason.REFRESH: "refresh_before_expiry",
    Reason.WORK_ORDER: "work_order",
    Reason.ALARM: "alarm",
    Reason.API_MISS: "api_miss",
    Reason.PREFETCH: "prefetch",
    Reason.BACKFILL: "backfill",
    Reason.EXPIRY_REQUEST: "expiry_request",
}

# PredictionSet.trigger for each predicting reason (schemas.predictions.Trigger).
TRIGGER = {
    Reason.FIRST_SEEN: "heartbeat",
    Reason.HEARTBEAT_CHANGED: "heartbeat",
    Reason.REFRESH: "expiry",
    Reason.RENEWED: "expiry",
    Reason.LAPSED: "expiry",
    Reason.WORK_ORDER: "work_order",
    Reason.ALARM: "alarm",
    Reason.API_MISS: "api_miss",
    Reason.PREFETCH: "prefetch",
    Reason.BACKFILL: "backfill",
    Reason.EXPIRY_REQUEST: "expiry",
}
REQUEST_REASON = {
    "api_miss": Reason.API_MISS,
    "prefetch": Reason.PREFETCH,
    "backfill": Reason.BACKFILL,
    "expiry": Reason.EXPIRY_REQUEST,
}


# Longest lineage list kept per prediction; a device that sent more triggers than this while
# waiting is counted in precast_worker_lineage_truncated_total. The oldest heartbeats go first:
# a newer heartbeat of the device supersedes them (the prediction is made from it), while each
# work order, alarm and request is an event of its own that lineage must keep naming.
LINEAGE_MAX = 64


@dataclass(slots=True)
class Pending:
    """A device waiting for a prediction: why, and every input record it answers."""

    device: str
    partition: int
    reason: Reason
    refs: list[tuple[KafkaMessage, str | None]] = field(default_factory=list)  # (record, event_id)
    requested_at_ms: int = 0  # newest precompute request, for a device with no data at all
    truncated: int = 0
    # refs[:pinned] are work orders, alarms and requests (kept first when lineage is cut);
    # -1 until a merge needs it (the hot path builds items without looking at it)
    pinned: int = -1
    # the last ref is the heartbeat the device's state came from (added at compute time)
    stated: bool = False

    def pins(self) -> int:
        if self.pinned < 0:
            self.pinned = len(self.refs) if _is_event(self.reason) else 0
        return self.pinned


def _is_event(reason: Reason) -> bool:
    """A trigger that is an event of its own, not a heartbeat reading (which a newer supersedes)."""
    return (
        reason in (Reason.CONTEXT_ONLY, Reason.WORK_ORDER, Reason.ALARM)
        or reason >= Reason.API_MISS
    )


def merge(old: Pending, new: Pending) -> Pending:
    """Two triggers for one device become one prediction that answers both."""
    pinned, k = old.pins(), new.pins()
    if new.reason > old.reason:  # requests > work orders/alarms > heartbeats
        old.reason = new.reason
    if k:
        old.refs[pinned:pinned] = new.refs[:k]
        pinned += k
        old.refs.extend(islice(new.refs, k, None))
    else:
        old.refs.extend(new.refs)
    drop = len(old.refs) - LINEAGE_MAX
    if drop > 0:
        old.truncated += drop
        beats = min(drop, len(old.refs) - pinned)  # the oldest heartbeats first
        del old.refs[pinned : pinned + beats]
        if drop > beats:  # more events than the cap: the oldest of them
            del old.refs[: drop - beats]
            pinned -= drop - beats
    old.pinned = pinned
    old.requested_at_ms = max(old.requested_at_ms, new.requested_at_ms)
    old.truncated += new.truncated
    return old
