"""Validity leases in the embedded store (the Redis store is held to the same cases in
tests/integration/test_serving_redis.py): newest-wins of answers is untouched by leases, a lease
extends only what its terms allow whatever order answers and leases arrive in, a fenced
generation's late lease changes nothing, an extendable answer keeps blocking older ones until
its terms end, and what a read is served (body, headers, age) under a lease."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from consumer_api.read.answer import Renderer, segments
from precast.serving import EXPIRED, OLDER, STORED, InvalidPrediction, MemoryStore
from precast.serving.entry import decode, encode
from precast.serving.leases import LeaseBook, lease_from_record
from schemas.leases import lease_key
from schemas.predictions import PredictionSet
from tests.serving_cases import (
    BASE_MS,
    HORIZON_MS,
    expected_validity,
    lease,
    lease_deliveries,
    leased,
)


def _apply(store: MemoryStore, order: list, now: int) -> None:
    for kind, k, x in order:
        if kind == "a":
            store.put_if_newer(k, x, now)
        else:
            store.put_leases([x], now)


@given(data=st.data(), deliveries=lease_deliveries)
def test_reads_see_the_extension_of_the_newest_answer_under_the_newest_lease(data, deliveries):
    """Any order, every delivery twice: the answer served is the newest, and its validity is
    what the newest answer's terms and its partition's newest lease give."""
    order = data.draw(st.permutations(deliveries + deliveries))
    store = MemoryStore(grace_ms=10**9)  # nothing expires here: the rule alone decides
    now = BASE_MS + 6_000  # no answer is from the future
    _apply(store, order, now)
    want = expected_validity(deliveries)
    got = {d: store.get(d, now) for d in want}
    assert {d: e.valid_until_ms for d, e in got.items()} == want
    newest = {d: store.peek(d).key for d in want}
    for d, e in got.items():
        assert e.key == newest[d]  # a lease never changes which answer is served
        doc = orjson.loads(e.body)
        assert doc["valid_until_ms"] == e.valid_until_ms  # the body says what it is served as
        assert ("extended_by" in doc) == (e.extension is not None)


def test_the_extension_rule():
    store, now = MemoryStore(), BASE_MS + 4_000
    store.put_many_if_newer(
        [
            ("g1", leased("g1", BASE_MS, BASE_MS, 1)),
            ("g2", leased("g2", BASE_MS, BASE_MS, 2)),
            ("p1", leased("p1", BASE_MS, BASE_MS, 1, partition=1)),
            ("none", leased("none", BASE_MS, BASE_MS, None)),
            ("capped", leased("capped", BASE_MS, BASE_MS, 1, extension_ms=7_000)),
        ],
        now,
    )
    assert store.put_leases([lease(0, 1, BASE_MS + 4_000, BASE_MS + 4_100)], now) == [STORED]
    until = BASE_MS + 4_000 + HORIZON_MS
    assert store.get("g1", now).valid_until_ms == until
    assert store.get("g2", now).valid_until_ms == BASE_MS + HORIZON_MS  # a newer generation's
    assert store.get("p1", now).valid_until_ms == BASE_MS + HORIZON_MS  # another partition's
    assert store.get("none", now).valid_until_ms == BASE_MS + HORIZON_MS  # no terms
    assert store.get("capped", now).valid_until_ms == BASE_MS + 7_000  # never past until_ms
    # a later generation's lease extends the answers of the generations before it
    assert store.put_leases([lease(0, 2, BASE_MS + 4_500, BASE_MS + 4_600)], now) == [STORED]
    assert store.get("g1", now).valid_until_ms == BASE_MS + 4_500 + HORIZON_MS
    assert store.get("g2", now).valid_until_ms == BASE_MS + 4_500 + HORIZON_MS
    # a lease that certified less than the answer's own data never shortens it
    store.put_if_newer("g1", leased("g1", BASE_MS + 9_000, BASE_MS + 9_000, 2), now)
    assert store.get("g1", now).valid_until_ms == BASE_MS + 9_000 + HORIZON_MS


def test_a_fenced_or_older_lease_arriving_late_changes_nothing():
    book = LeaseBook()
    new = lease(0, 2, BASE_MS + 1_000, BASE_MS + 1_100)
    assert book.put_many([new], BASE_MS) == [STORED]
    late = [
        lease(0, 1, BASE_MS + 9_000, BASE_MS + 9_100),  # a fenced generation, later times
        lease(0, 2, BASE_MS + 500, BASE_MS + 2_000),  # same generation, less certified
        new,  # a duplicate
    ]
    assert book.put_many(late, BASE_MS) == [OLDER, OLDER, OLDER]
    assert book.get(0) is new
    assert book.put_many([lease(0, 2, BASE_MS, BASE_MS)], BASE_MS + 60_000) == [EXPIRED]


def test_an_extendable_answer_blocks_older_ones_until_its_terms_end():
    """No resurrection: past its own validity an answer that a lease may extend is still the
    stored one, so an older answer arriving late (a replay, a slow replica) cannot take its
    place and be extended instead."""
    store = MemoryStore(grace_ms=1_000)
    new = leased("d", BASE_MS + 5_000, BASE_MS + 5_000, 1, extension_ms=60_000)
    old = leased("d", BASE_MS, BASE_MS, 1, extension_ms=60_000)
    store.put_if_newer("d", new, BASE_MS + 5_000)
    later = BASE_MS + 30_000  # long past its own validity, within its terms
    assert store.put_if_newer("d", old, later) == OLDER
    assert store.peek("d") is new
    assert store.get("d", later) is not None  # served as expired (asks), not unknown
    store.put_leases([lease(0, 1, later - 1_000, later)], later)
    assert store.get("d", later).valid_until_ms == later - 1_000 + HORIZON_MS
    gone = BASE_MS + 5_000 + 60_000 + 1_000
    assert store.get("d", gone) is None and store.sweep(gone + 1_000) == 1


def test_a_lapse_record_ends_the_extension_even_with_a_newer_lease_around():
    store, now = MemoryStore(), BASE_MS
    store.put_if_newer("d", leased("d", BASE_MS, BASE_MS, 1), now)
    store.put_leases([lease(0, 1, BASE_MS + 2_000, BASE_MS + 2_100)], now)
    lapse = leased("d", BASE_MS + 2_500, BASE_MS + 3_000, None)  # its last data, no terms
    assert store.put_if_newer("d", lapse, now) == STORED
    store.put_leases([lease(0, 1, BASE_MS + 4_000, BASE_MS + 4_100)], now)
    assert store.get("d", now).valid_until_ms == BASE_MS + 2_500 + HORIZON_MS


def test_redis_encoding_keeps_the_terms():
    e = leased("d", BASE_MS, BASE_MS, 7, partition=3, extension_ms=900_000)
    back = decode(encode(e))
    assert back == e and back.terms is not None
    assert (back.terms.partition, back.terms.generation) == (3, 7)
    assert back.keep_until_ms == back.until_ms == BASE_MS + 900_000
    # one shared terms object for every answer of a partition, generation and extension
    other = leased("e", BASE_MS + 1_000, BASE_MS + 1_000, 7, partition=3, extension_ms=900_000)
    assert other.terms is e.terms is back.terms
    plain = leased("d", BASE_MS, BASE_MS, None)
    assert decode(encode(plain)).terms is None and plain.keep_until_ms == plain.valid_until_ms


@pytest.mark.parametrize(
    ("value", "key", "why"),
    [
        (b"{", lease_key(0), "not_json"),
        (b'{"kind":"validity_lease","partition":0}', lease_key(0), "invalid"),
        (
            b'{"kind":"other","partition":0,"generation":1,"certified_at_ms":1,'
            b'"valid_until_ms":2,"produced_at_ms":1}',
            lease_key(0),
            "invalid",
        ),
        (
            b'{"kind":"validity_lease","partition":1,"generation":1,"certified_at_ms":1,'
            b'"valid_until_ms":2,"produced_at_ms":1}',
            lease_key(0),
            "key_mismatch",
        ),
        (
            b'{"kind":"validity_lease","partition":0,"generation":1,"certified_at_ms":5,'
            b'"valid_until_ms":2,"produced_at_ms":1}',
            lease_key(0),
            "invalid",
        ),
    ],
)
def test_bad_lease_records_are_refused_with_a_reason(value, key, why):
    with pytest.raises(InvalidPrediction) as info:
        lease_from_record(value, key, BASE_MS)
    assert str(info.value.reason) == why


def test_what_a_read_gets_under_a_lease():
    store, now = MemoryStore(), BASE_MS + 6_000
    e = leased("d", BASE_MS, BASE_MS + 40, 1)
    store.put_if_newer("d", e, BASE_MS)
    x = lease(0, 1, BASE_MS + 4_000, BASE_MS + 4_300)
    store.put_leases([x], BASE_MS + 4_300)
    served = store.get("d", now)
    assert served.etag == e.etag  # the same answer: a conditional GET still gets its 304
    r = Renderer("monitor_only", "fallback")
    a = r.render("d", served, now)
    assert a.source == "precomputed" and a.ask_reason is None
    doc = orjson.loads(a.body)
    PredictionSet.model_validate({k: v for k, v in doc.items() if k in PredictionSet.model_fields})
    assert doc["valid_until_ms"] == BASE_MS + 4_000 + HORIZON_MS
    assert doc["computed_at_ms"] == BASE_MS  # when it was computed: unchanged
    assert doc["age_ms"] == now - (BASE_MS + 4_000)  # since the newest data it was checked on
    assert doc["extended_by"] == {
        "partition": 0,
        "offset": x.offset,
        "generation": 1,
        "certified_at_ms": BASE_MS + 4_000,
    }
    headers = dict(a.headers)
    assert headers[b"cache-control"] == b"max-age=%d" % ((doc["valid_until_ms"] - now) // 1000)
    assert segments(served, now) == (0, 0, 1, now - x.certified_at_ms - 1)
    assert b"age.queue;dur=0, age.model;dur=0, age.kafka;dur=1" in headers[b"server-timing"]
    assert sum(segments(served, now)) == doc["age_ms"]
    # the copy is made once per (answer, lease) and reused
    assert store.get("d", now) is served
    # without the lease it would be an expired answer that asks
    bare = r.render("d", e, now)
    assert bare.source == "fallback" and bare.ask_reason == "expiry"
