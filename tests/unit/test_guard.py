"""precast.guard: whatever a decoder raises on a record ends as a counted rejection with a
reason, a bounded log line and a dead letter; precast.supervise: a background part that raises
is restarted and counted, and one that keeps raising gives up and turns unhealthy."""

from __future__ import annotations

import asyncio
import logging
import threading

import msgspec
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from precast.guard import REJECTED, Guard, Unusable, classify
from precast.kafka import Record
from precast.supervise import RESTARTS, Supervised
from schemas.deadletters import Reason


class _Dead:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes | None, Reason, str]] = []

    def send(self, msg: Record, reason: Reason, detail: str = "") -> None:
        self.sent.append((msg.value(), reason, detail))


class _S(msgspec.Struct):
    a: int


_DECODE = msgspec.json.Decoder(_S).decode


def _rec(value: bytes | None) -> Record:
    return Record("t", 0, 7, b"k", value)


def _count(reader: str, reason: str) -> float:
    return REJECTED.labels(reader, reason)._value.get()


def test_deep_nesting_is_a_counted_rejection_not_a_recursion_error():
    deep = b'{"a":1,"x":' + b"[" * 5000 + b"]" * 5000 + b"}"
    with pytest.raises(RecursionError):  # what a bare decoder does: it must not escape
        _DECODE(deep)
    dead = _Dead()
    g = Guard("test-deep", logging.getLogger("t"), dead)  # type: ignore[arg-type]
    before = _count("test-deep", "invalid")
    assert g.decode(lambda m: _DECODE(m.value()), _rec(deep)) is None
    assert _count("test-deep", "invalid") == before + 1
    assert dead.sent == [(deep, Reason.INVALID, "nested too deeply to decode")]


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (Unusable(Reason.KEY_MISMATCH, "k"), Reason.KEY_MISMATCH),
        (msgspec.DecodeError("bad"), Reason.NOT_JSON),
        (orjson.JSONDecodeError("bad", "doc", 0), Reason.NOT_JSON),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid"), Reason.NOT_JSON),
        (MemoryError(), Reason.OVERSIZED),
        (OverflowError("int too big"), Reason.INVALID),
        (TypeError("x"), Reason.INVALID),
    ],
)
def test_every_exception_gets_a_reason(exc: Exception, reason: Reason):
    got, detail = classify(exc)
    assert got is reason
    assert "\n" not in detail and len(detail) <= 320


def test_log_lines_are_bounded_per_reason(caplog: pytest.LogCaptureFixture):
    g = Guard("test-bounded", logging.getLogger("bounded"), log_every_s=3600)
    with caplog.at_level(logging.WARNING, "bounded"):
        for _ in range(50):
            g.decode(lambda m: _DECODE(m.value()), _rec(b"not json\x1b[2J"))
        g.decode(lambda m: _DECODE(m.value()), _rec(b'{"a": "x"}'))
    assert g.rejected == 51
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2  # one per reason: not_json, invalid
    assert all("\x1b" not in line and "\n" not in line for line in lines)


def test_keyboard_interrupt_is_not_swallowed():
    g = Guard("test-kbd", logging.getLogger("t"))

    def interrupt(_m: Record) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        g.decode(interrupt, _rec(b"{}"))


@given(st.binary(max_size=2048) | st.none())
def test_any_bytes_decode_or_count(value: bytes | None):
    g = Guard("test-any", logging.getLogger("t"))
    out = g.decode(lambda m: _DECODE(m.value()), _rec(value))  # type: ignore[arg-type]
    assert (out is None) == (g.rejected == 1)


def test_a_thread_that_raises_is_restarted_and_counted():
    stop = threading.Event()
    calls: list[int] = []

    def run() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise ValueError("boom")
        stop.wait()

    s = Supervised("test-thread", backoff_s=0.01, on_give_up=lambda *_: None)
    before = RESTARTS.labels("test-thread")._value.get()
    t = s.thread(run, stop)
    t.start()
    for _ in range(500):
        if len(calls) >= 3:
            break
        threading.Event().wait(0.01)
    stop.set()
    t.join(2)
    assert len(calls) == 3 and s.restarts == 2 and s.healthy
    assert RESTARTS.labels("test-thread")._value.get() == before + 2


def test_a_thread_that_keeps_raising_gives_up_unhealthy():
    stop = threading.Event()
    gave_up: list[str] = []

    def run() -> None:
        raise RuntimeError("always")

    s = Supervised(
        "test-giveup", max_restarts=3, backoff_s=0.001, on_give_up=lambda p, e: gave_up.append(p)
    )
    t = s.thread(run, stop)
    t.start()
    t.join(5)
    assert not t.is_alive()
    assert gave_up == ["test-giveup"] and not s.healthy and s.restarts == 3


def test_a_task_that_raises_is_restarted_then_cancelled():
    s = Supervised("test-task", backoff_s=0.001, on_give_up=lambda *_: None)
    calls: list[int] = []

    async def run() -> None:
        calls.append(1)
        if len(calls) < 2:
            raise ValueError("once")
        await asyncio.sleep(3600)

    async def main() -> None:
        task = s.task(run)
        while len(calls) < 2:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert s.restarts == 1 and s.healthy
