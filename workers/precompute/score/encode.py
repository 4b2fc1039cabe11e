"""PredictionSet records (schemas.predictions) for one batch, with lineage back to the inputs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate, chain, islice
from operator import attrgetter, methodcaller
from typing import cast

import numpy as np
import orjson

from precast.kafka import KafkaMessage
from workers.precompute.ingest.trace import trace_ids_json
from workers.precompute.items import TRIGGER, Pending, Reason

_REF = b'{"topic":"%s","partition":%d,"offset":%d,"event_id":%s,"trace_id":%s}'
_TOPIC, _PARTITION, _OFFSET = (
    methodcaller("topic"),
    methodcaller("partition"),
    methodcaller("offset"),
)
_REFS, _DEVICE, _REASON = attrgetter("refs"), attrgetter("device"), attrgetter("reason")
_STATED = attrgetter("stated")


def _ascii(texts: list[str]) -> list[bytes]:
    """UTF-8 bytes of each text; one encode for the whole list when none holds a NUL."""
    parts = "\0".join(texts).encode().split(b"\0")
    return parts if len(parts) == len(texts) else [t.encode() for t in texts]


def _json_ids(ids: list[str | None]) -> list[bytes]:
    # IDs reaching here passed the contracts' patterns ([A-Za-z0-9._:-]): nothing to escape.
    if None in ids:
        return [b"null" if i is None else b'"%s"' % i.encode() for i in ids]
    texts = cast(list[str], ids)  # no None among them (checked above)
    parts = (
        ('"' + '"\0"'.join(texts) + '"').encode().split(b"\0") if texts else []
    )  # one encode for all
    return parts if len(parts) == len(texts) else [b'"%s"' % i.encode() for i in texts]


def _ref_columns(refs: Sequence[tuple[KafkaMessage, str | None]]) -> tuple:
    """(topics, partitions, offsets, event ids, trace ids) of the references, JSON-ready."""
    msgs = [m for m, _ in refs]
    topics = list(map(_TOPIC, msgs))
    as_bytes = {t: t.encode() for t in set(topics)}
    return (
        list(map(as_bytes.__getitem__, topics)),
        list(map(_PARTITION, msgs)),
        list(map(_OFFSET, msgs)),
        _json_ids([e for _, e in refs]),
        trace_ids_json(msgs),
    )


@dataclass
class Encoded:
    keys: list[bytes]
    values: list[bytes]


def _template(
    version: str, k: int, produced_at_ms: int, inference_ms: int, lineage: bytes
) -> bytes:
    """printf-style PredictionSet template (bytes: formats faster than str and needs no encode)
    for k candidates, with what is the same for the whole batch (model version,
    produced_at_ms, inference_ms) filled in; `lineage` is its list."""
    cand = b'{"strategy":%s,"score":%s}'
    version_json = orjson.dumps(version).replace(b"%", b"%%")
    return (
        b'{"schema_version":1,"device_id":"%s","candidates":[' + b",".join([cand] * k) + b"]"
        b',"model_version":' + version_json + b',"computed_at_ms":%d,"valid_until_ms":%d,'
        b'"produced_at_ms":'
        + b"%d" % produced_at_ms
        + b',"trigger":"%s","lineage":'
        + lineage
        + b',"backfill":%s,"inference_ms":'
        + b"%d" % inference_ms
        + b"%s}"  # the lease terms (schemas.leases), or nothing
    )


@lru_cache(maxsize=16)
def _quoted(labels: tuple[str, ...]) -> np.ndarray:
    return np.array([orjson.dumps(lab) for lab in labels], dtype=object)


_POW10 = 10 ** np.arange(5, -1, -1, dtype=np.int64)


def score_text(scores: np.ndarray) -> list[bytes]:
    """Scores in [0, 1] rounded to 6 decimals as JSON numbers (b"0.123456", b"1.000000"), row
    by row, formatted for the whole batch at once (Python's float repr was half of the
    encoding time). The text parses to exactly the double `np.round(score, 6)`."""
    if scores.size < 64:  # a small batch: numpy's fixed cost per call would dominate
        # round() and np.rint both round half to even, on the same float64 product
        small = [round(v * 1e6) for v in scores.ravel().tolist()]
        if small and (min(small) < 0 or max(small) > 1_000_000):
            raise ValueError("model returned scores outside [0, 1]")
        return [b"%d.%06d" % divmod(m, 1_000_000) for m in small]
    micro = np.rint(scores.astype(np.float64).ravel() * 1e6).astype(np.int64)
    if micro.min() < 0 or micro.max() > 1_000_000:
        raise ValueError("model returned scores outside [0, 1]")  # a softmax never does
    chars = np.empty((len(micro), 8), dtype=np.uint8)
    chars[:, 0] = micro // 1_000_000 + 48
    chars[:, 1] = 46  # "."
    chars[:, 2:] = (micro[:, None] // _POW10) % 10 + 48
    return chars.view("S8").ravel().tolist()


# (trigger, backfill) JSON per reason, for a normal and for a backfill run; only predicting
# reasons have a trigger (a KeyError here is a bug upstream, as before).
_TRIGGERS = {
    False: (
        {r: t.encode() for r, t in TRIGGER.items()},
        {r: b"true" if r == Reason.BACKFILL else b"false" for r in TRIGGER},
    ),
    True: (dict.fromkeys(TRIGGER, b"backfill"), dict.fromkeys(TRIGGER, b"true")),
}


def backfill_outranks_live(outrank: bool) -> None:
    """Process-wide, for a backfill run only (`precast backfill --outrank-live`): its records
    say `backfill: false`, so they rank like live answers and win a tie on data time by being
    produced later (schemas.predictions.order_key). The trigger stays "backfill"."""
    _TRIGGERS[True] = (_TRIGGERS[True][0], dict.fromkeys(TRIGGER, b"false" if outrank else b"true"))


def encode(
    items: Sequence[Pending],
    idx: np.ndarray,
    scores: np.ndarray,
    labels: Sequence[str],
    version: str,
    computed_at: np.ndarray,
    horizon_ms: int,
    produced_at_ms: int,
    backfill: bool,
    inference_ms: int = 0,
    leases: list[bytes] | None = None,
) -> Encoded:
    """One PredictionSet per item, as JSON bytes keyed by device ID. Built column-wise: one
    printf per record, every other step over the whole batch. `leases` holds each item's
    `,"lease":{...}` member (b"" for none; `workers.precompute.publish.lease_book`)."""
    if not np.isfinite(scores).all():
        raise ValueError("model returned non-finite scores")
    k = idx.shape[1]
    lab = _quoted(tuple(labels))[idx]
    sc = score_text(scores)
    cands = [c for j in range(k) for c in (lab[:, j].tolist(), sc[j::k])]
    refs = list(map(_REFS, items))
    counts = list(map(len, refs))
    reasons = list(map(_REASON, items))
    trig, bf = _TRIGGERS[bool(backfill)]
    keys = _ascii(list(map(_DEVICE, items)))
    head = (
        keys,
        *cands,
        computed_at.tolist(),
        (computed_at + horizon_ms).tolist(),
        list(map(trig.__getitem__, reasons)),
    )
    tail = list(map(bf.__getitem__, reasons))
    terms = leases if leases is not None else [b""] * len(items)
    if counts.count(1) == len(counts) and not any(map(_STATED, items)):
        # one input each (the common case): lineage in the template
        tmpl = _template(version, k, produced_at_ms, inference_ms, b"[" + _REF + b"]")
        rows = zip(*head, *_ref_columns([r[0] for r in refs]), tail, terms, strict=True)
    else:
        tmpl = _template(version, k, produced_at_ms, inference_ms, b"%s")
        flat = list(chain.from_iterable(refs))
        ref_json = list(map(_REF.__mod__, zip(*_ref_columns(flat), strict=True)))
        if any(map(_STATED, items)):  # the heartbeat the state came from (its item's last ref)
            ends = list(accumulate(counts))
            for j in (j for j, it in enumerate(items) if it.stated):
                ref_json[ends[j] - 1] = ref_json[ends[j] - 1][:-1] + b',"state":true}'
        it = iter(ref_json)
        rows = zip(
            *head,
            [b"[" + b",".join(islice(it, n)) + b"]" for n in counts],
            tail,
            terms,
            strict=True,
        )
    return Encoded(keys, list(map(tmpl.__mod__, rows)))
