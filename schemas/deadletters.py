"""Dead-letter contract: how a rejected record is carried on the dead-letter topic.

The record keeps its original key, value and headers byte for byte (so a redrive republishes
exactly what was sent); precast adds headers prefixed `dlq.` that say where it came from, who
rejected it and why.

A reader may bound its letters instead (the read API's materializer does, for the predictions
topic): a value longer than PREVIEW_BYTES is cut to its first PREVIEW_BYTES, and the letter says
so (`dlq.value.truncated`), with the original size and the SHA-256 of the whole value, so the
record can be found and checked at its source offset. A truncated letter cannot be redriven.
"""

from __future__ import annotations

from enum import StrEnum

HEADER_PREFIX = "dlq."
H_REASON = "dlq.reason"
H_DETAIL = "dlq.detail"
H_COMPONENT = "dlq.component"
H_TOPIC = "dlq.source.topic"
H_PARTITION = "dlq.source.partition"
H_OFFSET = "dlq.source.offset"
H_TIMESTAMP = "dlq.source.timestamp_ms"
H_REJECTED_AT = "dlq.rejected_at_ms"
H_KEY_MISSING = "dlq.key_missing"
# Dead letters need a key too (the producer refuses empty keys); a record that had none gets
# this one, with `dlq.key_missing: 1` (key was null) or `dlq.key_missing: empty` (key was b"")
# so a redrive can restore the original key exactly.
MISSING_KEY = b"<no-key>"
KEY_WAS_NULL, KEY_WAS_EMPTY = b"1", b"empty"
# Longest detail text kept in a header.
MAX_DETAIL = 500
# A bounded letter (see above): only on a letter whose value was cut.
H_TRUNCATED = "dlq.value.truncated"  # b"1"
H_VALUE_SIZE = "dlq.value.size"  # bytes of the original value, decimal
H_VALUE_SHA256 = "dlq.value.sha256"  # of the original value, lower-case hex
TRUNCATED = b"1"
# Longest value a bounded letter copies whole: above any valid prediction (a few hundred bytes
# to ~2 KB), far below the megabyte values a hostile writer can put on the topic.
PREVIEW_BYTES = 4096


class Reason(StrEnum):
    NOT_JSON = "not_json"
    INVALID = "invalid"  # JSON, but breaks the contract (types, ranges, fields)
    MISSING_KEY = "missing_key"
    KEY_MISMATCH = "key_mismatch"  # key differs from the payload's device_id
    OVERSIZED = "oversized"
    NON_FINITE = "non_finite"  # NaN / Infinity
    UNKNOWN_SCHEMA_VERSION = "unknown_schema_version"
    TOMBSTONE = "tombstone"  # null value on an event topic
    MODEL_FAILURE = "model_failure"  # inference failed twice on the batch
    # event time ahead of the worker's clock by more than schemas.events.MAX_AHEAD_MS
    FUTURE_EVENT_TIME = "future_event_time"
    UNKNOWN = "unknown"
