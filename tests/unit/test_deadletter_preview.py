"""Bounded dead letters (schemas.deadletters): a reader that bounds its letters (the read API's
materializer) copies a value up to PREVIEW_BYTES whole and cuts a longer one to a preview, with
the original size and SHA-256 in headers; the SRE tools read such a letter clearly (list marks
it, export/inspect say where the whole record is, redrive leaves it with a one-line reason)."""

from __future__ import annotations

import argparse
import hashlib
import threading
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consumer_api.materialize import letters, materializer
from consumer_api.materialize.materializer import Materializer
from opsctl.commands import deadletters, redrive
from precast.deadletter import (
    dead_letter_info,
    dead_letter_record,
    is_truncated,
    original_headers,
    original_key,
    preview_of,
)
from precast.kafka import Record
from precast.serving import MemoryStore
from precast.settings import KafkaSettings, TopicSettings
from schemas import deadletters as dl
from tests.hostile_records import headers, keys, nested

TOPICS = TopicSettings(prefix="pv.", partitions=3)
PREDICTIONS = TOPICS.catalog().predictions.name


def _letter(value: bytes | None, bound: int | None = dl.PREVIEW_BYTES, key: bytes | None = b"k"):
    src = Record(PREDICTIONS, 2, 1534, key, value, [("traceparent", b"00-ab")], 1_700_000_000_000)
    return src, dead_letter_record(
        src, dl.Reason.INVALID, "bad", "api-materializer", preview_bytes=bound
    )


def test_a_long_value_becomes_a_preview_with_its_size_and_hash():
    value = nested(20_000)  # 40,000 bytes, like the record
    src, (key, letter, hdrs) = _letter(value)
    assert letter == value[: dl.PREVIEW_BYTES]
    info = dead_letter_info(hdrs)
    assert is_truncated(info)
    assert info["value.size"] == "40000"
    assert info["value.sha256"] == hashlib.sha256(value).hexdigest()
    # the coordinates that find the whole record, and the record's own key and headers
    assert (info["source.topic"], info["source.partition"], info["source.offset"]) == (
        PREDICTIONS,
        "2",
        "1534",
    )
    assert original_key(key, hdrs) == b"k"
    assert original_headers(hdrs) == [("traceparent", b"00-ab")]
    cut = preview_of(letter, info)
    assert cut is not None and (cut.kept, cut.size) == (dl.PREVIEW_BYTES, 40_000)
    line = cut.describe()
    assert "\n" not in line and f"{PREDICTIONS}[2]@1534" in line and "40,000" in line


def test_a_value_up_to_the_bound_is_copied_whole():
    for value in (b"x" * dl.PREVIEW_BYTES, b'{"a":1}', b""):
        _, (_, letter, hdrs) = _letter(value)
        info = dead_letter_info(hdrs)
        assert letter == value and not is_truncated(info) and preview_of(letter, info) is None
        assert "value.size" not in info and "value.sha256" not in info


def test_a_tombstone_and_an_unbounded_reader_copy_as_before():
    _, (_, letter, hdrs) = _letter(None)
    assert letter is None and not is_truncated(dead_letter_info(hdrs))
    big = b"y" * (dl.PREVIEW_BYTES * 3)
    _, (_, letter, hdrs) = _letter(big, bound=None)  # the workers, the context aggregator
    assert letter == big and not is_truncated(dead_letter_info(hdrs))


@settings(
    max_examples=200, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(st.binary(max_size=3_000), st.integers(0, 2_000), keys)
def test_any_value_and_bound_give_a_prefix_that_the_headers_describe(value, bound, key):
    src, (_, letter, hdrs) = _letter(value, bound, key)
    info = dead_letter_info(hdrs)
    assert letter == value[:bound]
    cut = preview_of(letter, info)
    if len(value) > bound:
        assert cut is not None and cut.size == len(value) and cut.kept == bound
        assert cut.sha256 == hashlib.sha256(value).hexdigest()
    else:
        assert cut is None and letter == value
    assert original_key(src.key() or dl.MISSING_KEY, hdrs) == key


@settings(max_examples=200)
@given(headers, st.binary(max_size=64))
def test_any_headers_read_as_a_preview_or_not_without_raising(hdrs, value):
    forged = list(hdrs or []) + [(dl.H_TRUNCATED, b"1"), (dl.H_VALUE_SIZE, b"\xff\x1b[2J")]
    for h in (hdrs, forged):
        info = dead_letter_info(h)
        cut = preview_of(value, info)
        if cut is not None:
            assert cut.size is None or cut.size >= 0
            assert (
                "\n"
                not in deadletters.to_json(Record("d", 0, 0, b"k", value, h), info)["truncated"]
            )


def test_redrive_leaves_a_truncated_letter_with_one_line_why():
    _, (_, _, hdrs) = _letter(nested(20_000))
    target, why = redrive.target_of(dead_letter_info(hdrs), TOPICS)
    assert target is None and why == redrive.TRUNCATED_WHY and "\n" not in why
    _, (_, _, whole) = _letter(b"not json")  # the same source, copied whole: it goes back
    assert redrive.target_of(dead_letter_info(whole), TOPICS) == (PREDICTIONS, "")


def _dead_letter(value: bytes) -> Record:
    key, letter, hdrs = _letter(value)[1]
    return Record("pv.dead-letters", 0, 7, key, letter, hdrs)


def test_list_marks_a_truncated_letter_and_export_says_where_the_record_is(monkeypatch, capsys):
    recs = [_dead_letter(nested(20_000)), _dead_letter(b"not json")]
    monkeypatch.setattr(
        deadletters,
        "selected",
        lambda args, s, what: ((m, dead_letter_info(m.headers())) for m in recs),
    )
    assert deadletters.run_list(argparse.Namespace(limit=50), None) == 0  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "1 of them truncated" in out
    assert f"cut: {dl.PREVIEW_BYTES:,} of 40,000 B" in out and "8 B" in out
    cut, whole = (deadletters.to_json(m, dead_letter_info(m.headers())) for m in recs)
    assert f"{PREDICTIONS}[2]@1534" in cut["truncated"] and whole["truncated"] is None


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None, list[tuple[str, bytes]]]] = []
        self.flushes = self.polls = self.queued = 0
        self.flush_timeouts: list[float] = []

    def produce(self, topic: str, key: bytes, value: bytes | None, headers: Any = None) -> None:
        self.sent.append((topic, key, value, headers))

    def flush(self, timeout: float = 30.0) -> None:
        self.flushes += 1
        self.flush_timeouts.append(timeout)
        self.queued = 0

    def pending(self) -> int:
        return self.queued

    def poll(self, *_: object) -> int:
        self.polls += 1
        return 0


class _Consumer:
    def __init__(self, queue: list[Record]) -> None:
        self.queue = queue

    def consume_available(self, *_: object) -> list[Record]:
        out, self.queue = self.queue, []
        return out

    def close(self) -> None:
        return


def _materializer(producer: _Producer) -> Materializer:
    return Materializer(
        KafkaSettings(bootstrap_servers="127.0.0.1:9"),  # nothing is ever sent or read
        PREDICTIONS,
        3,
        view=MemoryStore(),
        producer=producer,  # type: ignore[arg-type]
        dead_letter_topic="pv.dead-letters",
    )


def test_the_materializer_letters_are_bounded():
    producer = _Producer()
    mat = _materializer(producer)
    big, small = b'{"x":' * 6000 + b"1" + b"}" * 6000, b"not json"
    mat._source._c = _Consumer(  # type: ignore[assignment]
        [Record(PREDICTIONS, 0, 0, b"dev-1", big), Record(PREDICTIONS, 0, 1, b"dev-1", small)]
    )
    mat.run_once(0)
    assert [(t, len(v or b"")) for t, _, v, _ in producer.sent] == [
        ("pv.dead-letters", dl.PREVIEW_BYTES),
        ("pv.dead-letters", len(small)),
    ]
    info = dead_letter_info(producer.sent[0][3])
    assert is_truncated(info) and info["value.size"] == str(len(big))
    assert not is_truncated(dead_letter_info(producer.sent[1][3]))


def test_the_materializer_never_waits_for_its_letters_until_it_stops():
    """A wait for letters would stall the view for as long as the broker takes them: batches
    only serve delivery reports (while letters are queued), and stop waits, bounded."""
    producer = _Producer()
    mat = _materializer(producer)
    consumer = _Consumer([])
    mat._source._c = consumer  # type: ignore[assignment]
    mat.run_once(0)
    assert (producer.flushes, producer.polls) == (0, 0)  # nothing rejected, nothing queued
    for i in range(5):
        consumer.queue = [Record(PREDICTIONS, 0, i, b"dev-1", b"not json")]
        mat.run_once(0)
    assert (producer.flushes, producer.polls, len(producer.sent)) == (0, 5, 5)
    producer.queued = 5  # not delivered yet: an empty batch still serves their reports
    mat.run_once(0)
    assert (producer.flushes, producer.polls) == (0, 6)
    mat._thread = threading.Thread(target=lambda: None)  # the loop itself is not under test
    mat._thread.start()
    mat.stop()
    assert producer.flush_timeouts == [materializer.STOP_FLUSH_S]


def test_undelivered_letters_are_logged_once_a_minute_with_a_count(monkeypatch, caplog):
    clock = [1_000.0]
    monkeypatch.setattr(letters.time, "monotonic", lambda: clock[0])
    failed = letters.UndeliveredLetters(every_s=60)
    with caplog.at_level("WARNING", logger="precast.api.materializer"):
        for _ in range(3):
            failed(RuntimeError("broker down"))
            clock[0] += 10
        clock[0] += 40
        failed(RuntimeError("still down"))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "1 dead letter(s) not delivered (their records stay at their offsets); last: broker down",
        "3 dead letter(s) not delivered (their records stay at their offsets); last: still down",
    ]


def test_a_burst_of_small_batches_sweeps_the_view_at_most_every_quarter_second(monkeypatch):
    """Hundreds of poison batches a second must not each walk the view's expiry buckets."""
    clock = [1_000_000]
    monkeypatch.setattr(materializer.time, "time", lambda: clock[0] / 1000)
    mat = _materializer(_Producer())
    swept: list[int] = []
    mat.view.sweep = lambda now=None, budget=0: swept.append(now) or 0  # type: ignore[union-attr, method-assign]
    consumer = _Consumer([])
    mat._source._c = consumer  # type: ignore[assignment]
    for i in range(100):  # 100 batches over 500 ms
        consumer.queue = [Record(PREDICTIONS, 0, i, b"dev-1", b"not json")]
        mat.run_once(0)
        clock[0] += 5
    assert swept == [1_000_000, 1_000_250]
