"""The read API's materializer pauses its fetch briefly after a batch with rejections, when
caught up (`Materializer._coalesce`): a paced burst of records nobody can use then arrives in a
few batches instead of one per record. Never while behind, never for answers or leases alone,
never longer than COALESCE_S, and never left paused (stop, a failure, a restart)."""

from __future__ import annotations

import threading
import time
from typing import Any

import orjson
import pytest

from consumer_api.materialize import materializer
from consumer_api.materialize.materializer import Materializer
from precast.kafka import Record, TopicPartitionOffset
from precast.serving import MemoryStore
from precast.settings import KafkaSettings
from precast.supervise import Supervised

TOPIC = "co.predictions"
PARTITIONS = 3


class Consumer:
    """Hands out the batches it is given; says how far behind each partition is (`lags`), and
    records each pause and resume with when it came."""

    def __init__(self, lags: list[int]) -> None:
        self.queue: list[Record] = []
        self.lags = lags
        self.calls: list[tuple[str, list[int], float]] = []
        self.fail_pause = False

    def consume_available(self, *_: object) -> list[Record]:
        out, self.queue = self.queue, []
        return out

    def lag(self, parts: list[TopicPartitionOffset]) -> list[tuple[TopicPartitionOffset, int]]:
        return list(zip(parts, self.lags, strict=True))

    def pause(self, parts: list[TopicPartitionOffset]) -> None:
        self.calls.append(("pause", [p.partition for p in parts], time.monotonic()))
        if self.fail_pause:
            raise RuntimeError("broker thread gone")

    def resume(self, parts: list[TopicPartitionOffset]) -> None:
        self.calls.append(("resume", [p.partition for p in parts], time.monotonic()))

    def assign(self, parts: list[Any]) -> None:
        return

    def close(self) -> None:
        return


def _materializer(
    lags: list[int], supervised: Supervised | None = None
) -> tuple[Materializer, Consumer]:
    mat = Materializer(
        KafkaSettings(bootstrap_servers="127.0.0.1:9"),  # nothing is ever sent or read
        TOPIC,
        PARTITIONS,
        view=MemoryStore(),
        supervised=supervised,
    )
    consumer = Consumer(lags)
    mat._consumer = consumer  # type: ignore[assignment]
    return mat, consumer


def _answer(offset: int, device: str = "dev-1") -> Record:
    now = int(time.time() * 1000)
    doc = {
        "schema_version": 1,
        "device_id": device,
        "candidates": [{"strategy": "remote_restart", "score": 0.7}],
        "model_version": "1.0.0",
        "computed_at_ms": now,
        "valid_until_ms": now + 600_000,
        "produced_at_ms": now,
        "trigger": "heartbeat",
        "lineage": [],
    }
    return Record(TOPIC, 0, offset, device.encode(), orjson.dumps(doc))


def _poison(offset: int) -> Record:
    return Record(TOPIC, 1, offset, b"dev-1", b"[" * 5000 + b"]" * 5000)


def _lease(offset: int) -> Record:
    now = int(time.time() * 1000)
    body = {
        "kind": "validity_lease",
        "partition": 2,
        "generation": 1,
        "certified_at_ms": now - 500,
        "valid_until_ms": now + 30_000,
        "produced_at_ms": now - 400,
    }
    return Record(TOPIC, 2, offset, b"#lease:2", orjson.dumps(body))


def test_a_batch_with_a_rejection_pauses_every_partition_for_the_coalescing_time():
    mat, consumer = _materializer([0, 3, 64])  # caught up: at most COALESCE_MAX_LAG behind
    paused = materializer.PAUSES._value.get()
    consumer.queue = [_answer(0), _poison(0)]
    mat.run_once(0)
    assert [(what, parts) for what, parts, _ in consumer.calls] == [
        ("pause", [0, 1, 2]),
        ("resume", [0, 1, 2]),
    ]
    took = consumer.calls[1][2] - consumer.calls[0][2]
    assert materializer.COALESCE_S <= took < materializer.COALESCE_S + 0.5
    assert materializer.PAUSES._value.get() == paused + 1
    assert mat.view is not None and mat.view.get("dev-1") is not None  # the answer still stored


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param([_answer(0)], id="answers only"),
        pytest.param([_lease(0)], id="a validity lease"),  # read beside answers, not rejected
        pytest.param([Record(TOPIC, 0, 0, b"dev-1", None)], id="a tombstone"),
        pytest.param([], id="nothing"),
    ],
)
def test_a_batch_without_rejections_never_pauses(batch):
    mat, consumer = _materializer([0, 0, 0])
    consumer.queue = list(batch)
    mat.run_once(0)
    assert consumer.calls == []


@pytest.mark.parametrize(
    "lags",
    [
        pytest.param([0, 0, materializer.COALESCE_MAX_LAG + 1], id="one partition behind"),
        pytest.param([0, -1, 0], id="one partition not fetched yet"),
    ],
)
def test_a_reader_behind_or_not_yet_fetching_never_pauses(lags):
    """A backlog (or records too big for a fetch) is read at full speed: a pause per batch
    would cap the rate at a few fetches per COALESCE_S."""
    mat, consumer = _materializer(lags)
    consumer.queue = [_poison(i) for i in range(10)]
    mat.run_once(0)
    assert consumer.calls == []
    assert mat.guard.rejected == 10


def test_stop_ends_a_pause_at_once_and_leaves_the_fetch_resumed():
    mat, consumer = _materializer([0, 0, 0])
    # far longer than the test waits: only stop can end it early
    original, materializer.COALESCE_S = materializer.COALESCE_S, 5.0
    try:
        consumer.queue = [_poison(0)]
        runner = threading.Thread(target=mat.run_once, args=(0,))
        runner.start()
        deadline = time.monotonic() + 5
        while not consumer.calls and time.monotonic() < deadline:
            time.sleep(0.005)
        mat._stop.set()
        runner.join(2)
        assert not runner.is_alive()
    finally:
        materializer.COALESCE_S = original
    assert [what for what, _, _ in consumer.calls] == ["pause", "resume"]
    assert consumer.calls[1][2] - consumer.calls[0][2] < 1.0


def test_a_failure_while_paused_resumes_and_the_restart_resumes_again():
    mat, consumer = _materializer([0, 0, 0], Supervised("api-materializer", backoff_s=0.0))
    consumer.fail_pause = True
    consumer.queue = [_poison(0)]
    with pytest.raises(RuntimeError, match="broker thread gone"):
        mat.run_once(0)
    assert [what for what, _, _ in consumer.calls] == ["pause", "resume"]
    # the supervised loop's restart resumes every partition once more before it reads again
    consumer.calls.clear()
    mat._runs = 1
    mat._stop.set()  # one pass of the restart path, no loop
    mat._run()
    assert [(what, parts) for what, parts, _ in consumer.calls] == [("resume", [0, 1, 2])]
