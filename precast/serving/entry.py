"""One stored prediction (`Entry`): its newest-wins order key, expiry, timing for the delay's
origin, and the response bytes the read path serves without any JSON work.

Redis encoding (one string value per device; the Lua script parses the header line):

    "<computed 13d> <produced 13d> <valid_until 13d> <received 13d> <inference_ms|-> <flags> <model_version>\\n<body>"

Times are zero-padded epoch milliseconds so they compare as text and parse exactly as Lua
numbers; flags are `-` or letters: `P` a purge marker, `B` a backfill (ranked below a live
answer of the same data time; values written before that letter existed read as live), then
`L<partition>:<generation>:<until 13d>` last for an answer validity leases may extend (its
`LeaseTerms`, schemas.leases); the model version ends the line so it may hold any character
but a newline. `body` is the PredictionSet JSON as the worker published it. An answer whose
record carried a W3C `traceparent` (the worker's batch span, tracing on) has it on a line of its
own between the two, `<header>\n00-<trace 32 hex>-<span 16 hex>-<flags>\n<body>`: values without
it (tracing off, or written before the field existed) read as ever, and the Lua scripts read only
the first line.

What a record may carry into a response is checked here, once, at ingestion: the model
version becomes the `X-Model-Version` header and part of the `ETag` (no control character,
space, quote or backslash), and the body is spliced into event-stream `data:` lines (a record
whose JSON has raw line breaks between tokens is re-encoded compactly, so it stays one line).
"""

from __future__ import annotations

import re
from typing import Annotated

import msgspec

from schemas.deadletters import Reason
from schemas.events import is_device_id
from schemas.predictions import OrderKey, order_key

# Not allowed in a model version: it becomes a response header and part of a quoted ETag.
_UNSAFE_VERSION = re.compile(r'[\x00-\x20\x7f"\\]')
_WIDTH = 13
_MAX_MS = 10**_WIDTH - 1


class InvalidPrediction(ValueError):
    """A predictions record the store cannot hold; `reason` is a dead-letter reason."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


class Terms(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """An answer's lease terms (schemas.leases.LeaseTerms): which leases may extend it, and for
    how long after its data time (`until_ms` on the wire = computed_at + extension). Kept as
    the extension so that every answer of one partition, generation and extension shares one
    object (`terms`): a view of a million devices holds a few of them, not a million."""

    partition: int
    generation: int
    extension_ms: int


_TERMS: dict[tuple[int, int, int], Terms] = {}


def terms(partition: int, generation: int, extension_ms: int) -> Terms:
    """The shared `Terms` object of these values."""
    k = (partition, generation, extension_ms)
    t = _TERMS.get(k)
    if t is None:
        if len(_TERMS) > 100_000:  # many generations or extensions over a long life: start over
            _TERMS.clear()
        t = _TERMS[k] = Terms(partition, generation, extension_ms)
    return t


class Extension(msgspec.Struct, frozen=True, gc=False):
    """On an entry served under a lease (`precast.serving.leases`): the lease that extended it,
    where it is in the topic (its audit proof is by partition and offset), and its times, which
    the answer's age is measured from (the answer was checked against data up to certified_at)."""

    partition: int
    offset: int
    generation: int
    certified_at_ms: int
    produced_at_ms: int
    received_at_ms: int
    own_valid_until_ms: int  # the answer's own validity, before the lease


class Entry(msgspec.Struct, frozen=True, gc=False):
    """Immutable. Not tracked by the garbage collector (it holds only ints, strs and bytes): a
    view holds one per device, and tracked objects (a NamedTuple, measured) cost every
    collection a pass over all of them: ~4 us per record in a rebuild, and pauses of the
    read path when a full collection walks 1M entries."""

    computed_at_ms: int
    produced_at_ms: int
    model_version: str
    valid_until_ms: int
    received_at_ms: int  # when a materializer took it from Kafka (the "kafka" delay ends here)
    inference_ms: int  # model time reported by the worker; -1 when not reported
    purge: bool  # a purge marker: served like a miss (docs/architecture.md)
    body: bytes  # the PredictionSet JSON, served as is
    backfill: bool = False  # ranks below a live answer of the same data time (order_key)
    terms: Terms | None = None  # validity leases may extend it (schemas.leases)
    # Set only on the copy a read gets when a lease extended it (never stored): valid_until_ms
    # is then the extended validity and `body` says so (`precast.serving.leases.extend`).
    extension: Extension | None = None
    # The prediction record's `traceparent` (the worker's batch span), 55 bytes of W3C version
    # 00, checked at ingestion; None when the record had none (or the materializer kept none:
    # tracing off, an unsampled trace). A read continues its trace (consumer_api.read.read_spans).
    trace: bytes | None = None

    @property
    def key(self) -> OrderKey:
        return order_key(
            self.computed_at_ms, self.produced_at_ms, self.model_version, self.backfill
        )

    @property
    def until_ms(self) -> int:
        """No lease extends it past this (its terms' end; its own validity without terms)."""
        t = self.terms
        return self.valid_until_ms if t is None else self.computed_at_ms + t.extension_ms

    @property
    def keep_until_ms(self) -> int:
        """How long a store keeps it: its own validity, or the last moment a lease could extend
        it (an entry a lease may still extend keeps blocking older answers until then)."""
        t = self.terms
        if t is None:
            return self.valid_until_ms
        until = self.computed_at_ms + t.extension_ms
        return until if until > self.valid_until_ms else self.valid_until_ms

    def expires_at_ms(self, grace_ms: int) -> int:
        """When the store drops it: `keep_until_ms` plus the configured grace period."""
        return self.keep_until_ms + grace_ms

    @property
    def etag(self) -> str:
        # Identity of the prediction, not of the bytes: age_ms changes on every answer, so weak.
        return f'W/"{self.computed_at_ms:x}-{self.produced_at_ms:x}-{self.model_version}"'


_Ms = Annotated[int, msgspec.Meta(ge=0, le=_MAX_MS)]
_Count = Annotated[int, msgspec.Meta(ge=0, le=_MAX_MS)]


class _Terms(msgspec.Struct, gc=False):
    partition: _Count
    generation: _Count
    until_ms: _Ms


class _Served(msgspec.Struct, gc=False):  # freshly decoded JSON holds no cycles
    """The fields serving relies on. msgspec decodes only these and skips the rest (lineage,
    scores, ...) without building Python objects for it, while still rejecting malformed JSON
    anywhere in the record: about twice as fast as a full `orjson.loads` here, which is what
    a rebuild of 1M devices spends most of its time on (BENCHMARKS.md)."""

    device_id: str
    computed_at_ms: _Ms
    produced_at_ms: _Ms
    valid_until_ms: _Ms
    model_version: Annotated[str, msgspec.Meta(min_length=1)]
    trigger: object
    candidates: list[msgspec.Raw]  # a list; its items are served as they are
    inference_ms: object = None  # optional; anything but a non-negative int means "unknown"
    backfill: object = None  # only `true` ranks it as a backfill
    lease: _Terms | None = None


_DECODER = msgspec.json.Decoder(_Served)


def entry_from_prediction(value: bytes, received_at_ms: int, key: bytes | None = None) -> Entry:
    """An Entry from one predictions-topic record value. Checks only what serving relies on
    (the workers validate the full contract); raises `InvalidPrediction` otherwise."""
    return prediction_item(value, received_at_ms, key)[1]


def prediction_item(
    value: bytes, received_at_ms: int, key: bytes | None = None, trace: bytes | None = None
) -> tuple[str, Entry]:
    """(device_id, Entry) from one predictions-topic record value: what `put_many_if_newer`
    takes. The device ID has matched the pattern (and the record key, when given). `trace`:
    the record's `traceparent`, kept when it is a well-formed version-00 value (anything else
    is dropped here; the materializer counts it as malformed)."""
    try:
        p = _DECODER.decode(value)
    except msgspec.ValidationError as exc:
        raise InvalidPrediction(Reason.INVALID, str(exc)) from None
    except msgspec.DecodeError as exc:
        raise InvalidPrediction(Reason.NOT_JSON, str(exc)) from None
    mv, device_id = p.model_version, p.device_id
    if _UNSAFE_VERSION.search(mv) is not None or len(mv) > 128:
        raise InvalidPrediction(
            Reason.INVALID,
            "model_version must be at most 128 characters without control characters, "
            "spaces, quotes or backslashes",
        )
    if not is_device_id(device_id):
        raise InvalidPrediction(Reason.INVALID, "device_id does not match the device ID pattern")
    if key is not None and key != device_id.encode():
        raise InvalidPrediction(Reason.KEY_MISMATCH, f"key {key[:64]!r} != device_id {device_id!r}")
    inf = p.inference_ms
    if b"\n" in value or b"\r" in value:  # valid JSON whitespace, but it would end a data: line
        value = msgspec.json.format(value, indent=-1)  # numbers kept as written
    elif value[-1:] != b"}":  # the read path splices fields before the closing brace
        value = value.rstrip()
    lt, purge = p.lease, p.trigger == "purge"
    return device_id, Entry(
        p.computed_at_ms,
        p.produced_at_ms,
        mv,
        p.valid_until_ms,
        received_at_ms,
        inf if type(inf) is int and 0 <= inf <= _MAX_MS else -1,
        purge,
        value,
        p.backfill is True,
        # a purge marker is never extended, whatever it carries
        None
        if lt is None or purge
        else terms(lt.partition, lt.generation, max(0, lt.until_ms - p.computed_at_ms)),
        None,
        trace if trace is not None and is_trace(trace) else None,
    )


# A W3C version-00 `traceparent` as Entry.trace holds it: lower-case hex, IDs not all zero.
_TRACE = re.compile(rb"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")


def is_trace(value: bytes) -> bool:
    """A well-formed version-00 `traceparent` (55 bytes), as an Entry keeps it."""
    return type(value) is bytes and len(value) == 55 and _TRACE.fullmatch(value) is not None


def _flag(e: Entry) -> bytes:
    """`P` purge marker, `B` backfill, then the lease terms (never on a purge marker); `-`."""
    out = (b"P" if e.purge else b"") + (b"B" if e.backfill else b"")
    t = e.terms
    if t is not None and not e.purge:
        out += b"L%d:%d:%013d" % (t.partition, t.generation, e.computed_at_ms + t.extension_ms)
    return out or b"-"


def encode(e: Entry) -> bytes:
    """The Redis value (see the module docstring)."""
    body = e.body if e.trace is None else e.trace + b"\n" + e.body
    return b"%013d %013d %013d %013d %s %s %s\n%s" % (
        e.computed_at_ms,
        e.produced_at_ms,
        e.valid_until_ms,
        e.received_at_ms,
        b"%d" % e.inference_ms if e.inference_ms >= 0 else b"-",
        _flag(e),
        e.model_version.encode(),
        body,
    )


# What `encode` writes, and nothing else: a value read back from Redis is checked against it
# (anything that can write to Redis could otherwise put a line break into a response header
# through the model version, or a body that breaks an event-stream line).
_HEAD = re.compile(
    rb"(\d{13}) (\d{13}) (\d{13}) (\d{13}) (\d{1,13}|-) "
    rb"(-|P?B?(?:L(\d{1,13}):(\d{1,13}):(\d{13}))?) "
    rb'([^\x00-\x20\x7f"\\]{1,512})'
)


def decode(raw: bytes) -> Entry:
    """The Entry of a Redis value; `ValueError` for anything `encode` would not have written
    (a stored value is re-checked as strictly as a record at ingestion)."""
    head, nl, body = raw.partition(b"\n")
    trace = None
    if body[:1] != b"{":  # the answer's trace context on a line of its own, or malformed
        trace, _, body = body.partition(b"\n")
        if not is_trace(trace) or body[:1] != b"{":
            raise ValueError("not a stored entry (trace line or body malformed)")
    m = _HEAD.fullmatch(head)
    if m is None or not nl or body[-1:] != b"}":
        raise ValueError("not a stored entry (header line or body malformed)")
    if b"\n" in body or b"\r" in body:
        raise ValueError("not a stored entry (line break in the body)")
    c, pr, v, r, inf, flags, part, gen, until, mv_b = m.groups()
    mv = mv_b.decode()  # UnicodeDecodeError is a ValueError
    if len(mv) > 128:
        raise ValueError("not a stored entry (model version longer than 128 characters)")
    computed = int(c)
    t = None
    if part is not None:
        t = terms(int(part), int(gen), max(0, int(until) - computed))
    return Entry(
        computed,
        int(pr),
        mv,
        int(v),
        int(r),
        -1 if inf == b"-" else int(inf),
        b"P" in flags,
        body,
        b"B" in flags,
        t,
        None,
        trace,
    )
