"""One stored prediction (`Entry`): its newest-wins order key, expiry, timing for the delay's
origin, and the response bytes the read path serves without any JSON work.

Redis encoding (one string value per device; the Lua script parses the header line):

    "<computed 13d> <produced 13d> <valid_until 13d> <received 13d> <inference_ms|-> <P|-> <model_version>\\n<body>"

Times are zero-padded epoch milliseconds so they compare as text and parse exactly as Lua
numbers; `P` marks a purge marker; the model version ends the line so it may hold any
character but a newline. `body` is the PredictionSet JSON as the worker published it.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import orjson

from schemas.events import DEVICE_ID_PATTERN
from schemas.predictions import OrderKey, order_key

_DEVICE_ID = re.compile(DEVICE_ID_PATTERN)
_WIDTH = 13
_MAX_MS = 10**_WIDTH - 1


class InvalidPrediction(ValueError):
    """A predictions record the store cannot hold; `reason` is a dead-letter reason."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


class Entry(NamedTuple):
    computed_at_ms: int
    produced_at_ms: int
    model_version: str
    valid_until_ms: int
    received_at_ms: int   # when a materializer took it from Kafka (the "kafka" delay ends here)
    inference_ms: int     # model time reported by the worker; -1 when not reported
    purge: bool           # a purge marker: served like a miss (docs/architecture.md)
    body: bytes           # the PredictionSet JSON, served as is

    @property
    def key(self) -> OrderKey:
        return order_key(self.computed_at_ms, self.produced_at_ms, self.model_version)

    def expires_at_ms(self, grace_ms: int) -> int:
        """When the store drops it: `valid_until` plus the configured grace period."""
        return self.valid_until_ms + grace_ms

    @property
    def etag(self) -> str:
        # Identity of the prediction, not of the bytes: age_ms changes on every answer, so weak.
        return f'W/"{self.computed_at_ms:x}-{self.produced_at_ms:x}-{self.model_version}"'


def valid_device_id(device_id: str) -> bool:
    """The only device IDs that ever reach a store key (no spaces, globs or control bytes)."""
    return _DEVICE_ID.fullmatch(device_id) is not None


def entry_from_prediction(value: bytes, received_at_ms: int, key: bytes | None = None) -> Entry:
    """An Entry from one predictions-topic record value. Checks only what serving relies on
    (the workers validate the full contract); raises `InvalidPrediction` otherwise."""
    try:
        p = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise InvalidPrediction("not_json", str(exc)) from None
    if type(p) is not dict:
        raise InvalidPrediction("invalid", "not a JSON object")
    try:
        device_id, c, pr, v = p["device_id"], p["computed_at_ms"], p["produced_at_ms"], p["valid_until_ms"]
        mv, trigger, candidates = p["model_version"], p["trigger"], p["candidates"]
    except KeyError as exc:
        raise InvalidPrediction("invalid", f"missing field {exc.args[0]}") from None
    if not (type(c) is int and type(pr) is int and type(v) is int and 0 <= c <= _MAX_MS
            and 0 <= pr <= _MAX_MS and 0 <= v <= _MAX_MS):
        raise InvalidPrediction("invalid", "computed_at_ms, produced_at_ms, valid_until_ms must be epoch ms")
    if type(mv) is not str or not mv or "\n" in mv or type(candidates) is not list:
        raise InvalidPrediction("invalid", "model_version must be a one-line string, candidates a list")
    if type(device_id) is not str or not valid_device_id(device_id):
        raise InvalidPrediction("invalid", "device_id does not match the device ID pattern")
    if key is not None and key != device_id.encode():
        raise InvalidPrediction("key_mismatch", f"key {key[:64]!r} != device_id {device_id!r}")
    inf = p.get("inference_ms")
    if value[-1:] != b"}":  # the read path splices fields before the closing brace
        value = value.rstrip()
    return Entry(c, pr, mv, v, received_at_ms, inf if type(inf) is int and inf >= 0 else -1,
                 trigger == "purge", value)


def encode(e: Entry) -> bytes:
    """The Redis value (see the module docstring)."""
    inf = str(e.inference_ms) if e.inference_ms >= 0 else "-"
    head = (f"{e.computed_at_ms:013d} {e.produced_at_ms:013d} {e.valid_until_ms:013d} "
            f"{e.received_at_ms:013d} {inf} {'P' if e.purge else '-'} {e.model_version}\n")
    return head.encode() + e.body


def decode(raw: bytes) -> Entry:
    head, _, body = raw.partition(b"\n")
    c, pr, v, r, inf, purge, mv = head.decode().split(" ", 6)
    return Entry(int(c), int(pr), mv, int(v), int(r), -1 if inf == "-" else int(inf), purge == "P", body)
