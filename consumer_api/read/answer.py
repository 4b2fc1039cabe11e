"""What one device's answer is (precomputed, stale or fallback), its bytes and its headers.

Pure: no I/O, no JSON encoding. A stored entry's body is the PredictionSet JSON as the worker
published it; the serving fields are spliced in before its closing brace.

Two measures, kept apart (precast.telemetry.objectives), both in the Server-Timing header:
- the answer's *age* (now - computed_at, i.e. since the newest input event), split into
  pipeline segments taken from the entry's own timestamps, `age.*` entries:
    queue  = produced_at - computed_at - model   (event in Kafka, waiting for a worker)
    model  = inference_ms reported by the worker (0 when not reported)
    kafka  = received_at - produced_at           (prediction in Kafka until a materializer took it)
    cache  = now - received_at                   (held by the serving store until this read)
  For an answer served under a validity lease (`e.extension`, precast.serving.leases) the age is
  since the lease's certification (the newest data every answer it covers was checked against)
  and the segments are the lease's: kafka = its received_at - produced_at, and everything else
  since the certification is cache (the answer held valid without a record of its own); queue
  and model are 0 (nothing waited for a worker or a model).
  `delay_origin` in the body is the largest age segment; a fallback's (no data, no age) is
  `fallback`;
- what this read made the client *wait* for on the server, `wait.*` entries (ms, 3 decimals):
    read    = the server's own time for the read up to rendering, less db_lock
    db_lock = the read waiting for the store (the view's lookup; a Redis GET's round trip)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from precast.edge_cache.keys import answer_keys
from precast.serving import Entry
from precast.serving.leases import Lease

PRECOMPUTED, STALE, FALLBACK = "precomputed", "stale", "fallback"
# Why an answer is the fallback (the `reason` field).
UNKNOWN_DEVICE, EXPIRED, PURGED, STORE_UNAVAILABLE = (
    "unknown_device",
    "expired",
    "purged",
    "store_unavailable",
)
FALLBACK_REASONS = (UNKNOWN_DEVICE, EXPIRED, PURGED, STORE_UNAVAILABLE)
SEGMENTS = ("queue", "model", "kafka", "cache")
_JSON = (b"content-type", b"application/json")


def segments(e: Entry, now_ms: int) -> tuple[int, int, int, int]:
    x = e.extension
    if x is not None:
        kafka = max(0, x.received_at_ms - x.produced_at_ms)
        return (0, 0, kafka, max(0, now_ms - x.certified_at_ms - kafka))
    model = e.inference_ms if e.inference_ms > 0 else 0
    return (
        max(0, e.produced_at_ms - e.computed_at_ms - model),
        model,
        max(0, e.received_at_ms - e.produced_at_ms),
        max(0, now_ms - e.received_at_ms),
    )


def data_time(e: Entry) -> int:
    """Since when the answer's age counts: its data time, or its lease's certification."""
    x = e.extension
    return e.computed_at_ms if x is None else x.certified_at_ms


def origin(seg: tuple[int, int, int, int]) -> str:
    best = 0
    for i in (1, 2, 3):
        if seg[i] > seg[best]:
            best = i
    return SEGMENTS[best]


_TIMING = b"age.queue;dur=%d, age.model;dur=%d, age.kafka;dur=%d, age.cache;dur=%d"
_WAIT = b"wait.read;dur=%s, wait.db_lock;dur=%s"
_FULL = _TIMING + b", " + _WAIT
# Milliseconds with microseconds, "0.000" to "0.999" ready-made: a read's own waits are nearly
# always under a millisecond, and formatting them took more than the rest of the header.
_SUB_MS = tuple(b"0.%03d" % us for us in range(1000))
_ORIGINS = tuple(s.encode() for s in SEGMENTS)
Wait = tuple[int, int]  # (read, db_lock) in nanoseconds


def _ms(us: int) -> bytes:
    return _SUB_MS[us] if us < 1000 else b"%d.%03d" % (us // 1000, us % 1000)


def wait_timing(wait: Wait) -> bytes:
    """The `wait.*` Server-Timing entries (ms with microseconds) of (read, db_lock) in ns."""
    return _WAIT % (_ms(wait[0] // 1000), _ms(wait[1] // 1000))


@dataclass(frozen=True, slots=True)
class EdgeLeases:
    """Answers with lease terms may stay at an edge up to `ttl_s` (`s-maxage`, key
    `lp:<partition>`) while a replica watches their partition's leases and purges the key
    before one would lapse (precast.edge_cache.purge; PRECAST_EDGE__LEASE_TTL_S)."""

    ttl_s: int
    min_left_ms: int  # no s-maxage when the partition's lease ends sooner than this
    lease_of: Callable[[int], Lease | None]  # the replica's newest lease of a partition


def fresh(
    device_id: str,
    e: Entry,
    now_ms: int,
    read_ns: int = 0,
    lock_ns: int = 0,
    edge: EdgeLeases | None = None,
) -> tuple[bytes, list[tuple[bytes, bytes]], bytes, int]:
    """(body, headers, etag, max_age) of a precomputed answer: the hot path's rendering, kept to
    a handful of operations (it runs once per read; profile in BENCHMARKS.md). Its
    `Surrogate-Key` names what an edge cache can purge it by (precast.edge_cache.keys); with
    `edge`, an answer a lease extends or will extend may stay there longer (`lease_shared`)."""
    x = e.extension
    shared = lease_key = b""
    if x is None:
        since = e.computed_at_ms
        model = e.inference_ms if e.inference_ms > 0 else 0
        queue = e.produced_at_ms - since - model
        kafka = e.received_at_ms - e.produced_at_ms
        cache = now_ms - e.received_at_ms
    else:  # served under a validity lease: the lease's times (see the module docstring)
        since, model, queue = x.certified_at_ms, 0, 0
        kafka = x.received_at_ms - x.produced_at_ms
        cache = now_ms - since - (kafka if kafka > 0 else 0)
    t = e.terms
    if edge is not None and t is not None:
        shared = lease_shared(e, edge.lease_of(t.partition), now_ms, edge.ttl_s, edge.min_left_ms)
        lease_key = b" lp:%d" % t.partition if shared else b""
    seg = (queue if queue > 0 else 0, model, kafka if kafka > 0 else 0, cache if cache > 0 else 0)
    org = _ORIGINS[seg.index(max(seg))]  # the first of equal segments, as `origin`
    r, k = read_ns // 1000, lock_ns // 1000  # microseconds
    max_age = (e.valid_until_ms - now_ms) // 1000
    etag = b'W/"%x-%x-%s"' % (e.computed_at_ms, e.produced_at_ms, e.model_version.encode())
    body = b'%s,"source":"precomputed","age_ms":%d,"delay_origin":"%s"}' % (
        e.body[:-1],
        now_ms - since,
        org,
    )
    return (
        body,
        [
            _JSON,
            (b"cache-control", b"max-age=%d%s" % (max_age, shared)),
            (b"etag", etag),
            (b"x-model-version", e.model_version.encode()),
            (b"surrogate-key", answer_keys(device_id, e.model_version) + lease_key),
            (
                b"server-timing",
                _FULL
                % (
                    seg[0],
                    seg[1],
                    seg[2],
                    seg[3],
                    _SUB_MS[r] if r < 1000 else _ms(r),
                    _SUB_MS[k] if k < 1000 else _ms(k),
                ),
            ),
        ],
        etag,
        max_age,
    )


def lease_shared(e: Entry, lease: Lease | None, now_ms: int, cap_s: int, min_left_ms: int) -> bytes:
    """`, s-maxage=N` for an answer with lease terms that its partition's current lease
    extends now or will extend when its own validity ends (same partition, a generation not
    newer than the lease's): up to `cap_s`, never past its terms' end. b"" without such a
    lease, when the lease ends within `min_left_ms` (twice the replicas' purge guard: a copy
    made now could miss the lapse purge), or when that is no longer than its own max-age.
    An answer the lease does not extend yet is covered all the same: the lease chain goes on
    (and extends it in time) or lapses (and its purge drops the copy); a device the worker
    stops covering gets a newer answer first, and its `d:` purge."""
    t = e.terms
    if t is None or lease is None or lease.partition != t.partition:
        return b""
    if t.generation > lease.generation or lease.valid_until_ms - now_ms <= min_left_ms:
        return b""
    end_s = (e.until_ms - now_ms) // 1000
    s = cap_s if cap_s < end_s else end_s
    return b", s-maxage=%d" % s if s * 1000 > e.valid_until_ms - now_ms else b""


@dataclass(frozen=True, slots=True)
class Answer:
    source: str
    body: bytes
    headers: list[tuple[bytes, bytes]]
    etag: bytes | None
    ask_reason: str | None  # precompute-request reason when the answer asks for one
    max_age: int | None = None  # seconds a client may reuse it (precomputed answers only)
    reason: str | None = None  # why it is the fallback (FALLBACK_REASONS); None otherwise


class Renderer:
    def __init__(self, default_strategy: str, expired: str) -> None:
        self.serve_stale = expired == "stale"
        # Set by the entry point when an edge keeps leased answers (`lease_at_edge`).
        self.edge: EdgeLeases | None = None
        self._fallback_candidates = b'[{"strategy":"%s","score":1.0}]' % default_strategy.encode()

    def lease_at_edge(
        self, ttl_s: int, guard_ms: int, lease_of: Callable[[int], Lease | None]
    ) -> None:
        """Answers with lease terms may stay at an edge up to `ttl_s` (`s-maxage`), except within
        twice the replicas' purge guard of their lease's end: a copy made after the lapse purge
        must not outlive the answer (precast.edge_cache.purge)."""
        self.edge = EdgeLeases(ttl_s, 2 * guard_ms, lease_of)

    def classify(self, e: Entry | None, now_ms: int) -> tuple[str, str | None]:
        """(source, reason): reason is the precompute-request reason, or why it is a fallback."""
        if e is None:  # no entry at all: see `fallback` for why this never asks the workers
            return FALLBACK, UNKNOWN_DEVICE
        if e.purge:
            return FALLBACK, "purged"
        if now_ms >= e.valid_until_ms:
            return (STALE, "expired") if self.serve_stale else (FALLBACK, "expired")
        return PRECOMPUTED, None

    def render(
        self, device_id: str, e: Entry | None, now_ms: int, wait: Wait | None = None
    ) -> Answer:
        """The answer; `wait` (read, db_lock in ns) adds the `wait.*` Server-Timing entries."""
        source, reason = self.classify(e, now_ms)
        if source == FALLBACK:
            return self.fallback(device_id, reason or UNKNOWN_DEVICE, wait)
        assert e is not None
        if source == PRECOMPUTED:
            body, headers, etag, max_age = fresh(
                device_id,
                e,
                now_ms,
                *(wait or (0, 0)),
                self.edge,
            )
            if wait is None:  # nothing measured: no wait entries
                headers[-1] = (b"server-timing", _TIMING % segments(e, now_ms))
            return Answer(source, body, headers, etag, None, max_age)
        seg = segments(e, now_ms)
        body = b'%s,"source":"stale","age_ms":%d,"delay_origin":"%s"}' % (
            e.body[:-1],
            now_ms - data_time(e),
            origin(seg).encode(),
        )
        etag = e.etag.encode()[:-1] + b'-stale"'
        headers = [
            _JSON,
            (b"cache-control", b"no-cache"),
            (b"etag", etag),
            (b"x-model-version", e.model_version.encode()),
            (b"server-timing", _TIMING % seg + (b", " + wait_timing(wait) if wait else b"")),
        ]
        return Answer(source, body, headers, etag, "expiry" if reason == "expired" else None, None)

    def fallback(self, device_id: str, reason: str, wait: Wait | None = None) -> Answer:
        """The default strategy; a fallback has no data, so no age: only `wait.*` entries."""
        body = (
            b'{"device_id":"%s","candidates":%s,"model_version":null,"computed_at_ms":null,'
            b'"valid_until_ms":null,"age_ms":null,"source":"fallback","delay_origin":"fallback",'
            b'"reason":"%s"}' % (device_id.encode(), self._fallback_candidates, reason.encode())
        )
        headers = [_JSON, (b"cache-control", b"no-store")]
        if wait is not None:
            headers.append((b"server-timing", wait_timing(wait)))
        # Asking is for devices the store knows (an expired answer, a purge marker). A store
        # outage is no reason: the data exists, the store is down. Neither is an unknown device:
        # every device with data gets a prediction from its first heartbeat without anyone
        # asking, and the workers publish nothing for one without data, so a request would only
        # let any reader write per-ID state (docs/api.md, "Unknown devices").
        ask_reason = (
            None
            if reason in (STORE_UNAVAILABLE, UNKNOWN_DEVICE)
            else ("expiry" if reason == "expired" else "api_miss")
        )
        return Answer(FALLBACK, body, headers, None, ask_reason, reason=reason)


def etag_matches(if_none_match: bytes, etag: bytes) -> bool:
    """Weak comparison (RFC 9110 13.1.2), for a list or `*`."""
    if if_none_match.strip() == b"*":
        return True
    bare = etag.removeprefix(b"W/")
    return any(t.strip().removeprefix(b"W/") == bare for t in if_none_match.split(b","))
