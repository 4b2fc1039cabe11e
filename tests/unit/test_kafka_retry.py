"""The one retry-while-the-cluster-settles helper: which failures it waits out, and when it stops."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from precast.kafka import SETTLING_CODES, KafkaFailure, is_settling, retry_settling


class FakeClock:
    """Time that moves only when the helper sleeps, so give-up points are exact."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def failing(errors: list[BaseException], result: str = "ok") -> tuple[Callable[[], str], list[int]]:
    """A call that raises `errors` in turn, then returns `result`; counts its calls."""
    calls = [0]

    def call() -> str:
        calls[0] += 1
        if errors:
            raise errors.pop(0)
        return result

    return call, calls


@pytest.mark.parametrize(
    "code",
    [
        "NOT_LEADER_FOR_PARTITION",
        "NOT_LEADER_OR_FOLLOWER",
        "LEADER_NOT_AVAILABLE",
        "UNKNOWN_TOPIC_OR_PART",
        "_UNKNOWN_PARTITION",
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_COORDINATOR",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "_TIMED_OUT",
        "_TRANSPORT",
    ],
)
def test_leader_and_coordinator_answers_are_settling(code: str) -> None:
    assert code in SETTLING_CODES
    assert is_settling(KafkaFailure("x", code=code))


@pytest.mark.parametrize(
    "code", ["TOPIC_AUTHORIZATION_FAILED", "_INVALID_ARG", "UNKNOWN_MEMBER_ID", "_FATAL", ""]
)
def test_other_answers_are_not_settling(code: str) -> None:
    assert not is_settling(KafkaFailure("x", code=code))


def test_the_clients_retriable_flag_counts_too() -> None:
    assert not is_settling(KafkaFailure("x", code="REQUEST_TIMED_OUT"))
    assert is_settling(KafkaFailure("x", code="REQUEST_TIMED_OUT", retriable=True))


def test_a_fatal_error_never_settles() -> None:
    assert not is_settling(KafkaFailure("x", code="LEADER_NOT_AVAILABLE", fatal=True))
    assert not is_settling(KafkaFailure("x", code="_TRANSPORT", retriable=True, fatal=True))


def test_returns_at_once_without_sleeping() -> None:
    clock = FakeClock()
    call, calls = failing([])
    assert retry_settling(call, patience_s=5, clock=clock, sleep=clock.sleep) == "ok"
    assert calls == [1] and clock.sleeps == []


def test_retries_settling_failures_until_the_call_answers() -> None:
    clock = FakeClock()
    errors: list[BaseException] = [
        KafkaFailure("a", code="NOT_LEADER_OR_FOLLOWER"),
        KafkaFailure("b", code="COORDINATOR_LOAD_IN_PROGRESS"),
        KafkaFailure("c", code="REQUEST_TIMED_OUT", retriable=True),
    ]
    call, calls = failing(errors, result="answer")
    got = retry_settling(call, patience_s=5, interval_s=0.25, clock=clock, sleep=clock.sleep)
    assert got == "answer"
    assert calls == [4]
    assert clock.sleeps == [0.25, 0.25, 0.25]


def test_gives_up_after_patience_with_the_last_failure() -> None:
    clock = FakeClock()
    errors: list[BaseException] = [
        KafkaFailure(f"try {i}", code="LEADER_NOT_AVAILABLE") for i in range(100)
    ]
    call, calls = failing(errors)
    with pytest.raises(KafkaFailure) as info:
        retry_settling(call, patience_s=1.0, interval_s=0.25, clock=clock, sleep=clock.sleep)
    # Tries at t = 0, 0.25, 0.5, 0.75 and 1.0; the one at the deadline is the last.
    assert calls == [5]
    assert str(info.value).startswith("try 4")
    assert clock.now - 100.0 == pytest.approx(1.0)


def test_zero_patience_tries_once() -> None:
    clock = FakeClock()
    call, calls = failing([KafkaFailure("x", code="LEADER_NOT_AVAILABLE")])
    with pytest.raises(KafkaFailure):
        retry_settling(call, patience_s=0, clock=clock, sleep=clock.sleep)
    assert calls == [1] and clock.sleeps == []


def test_a_real_failure_is_raised_at_once() -> None:
    clock = FakeClock()
    call, calls = failing([KafkaFailure("denied", code="TOPIC_AUTHORIZATION_FAILED")])
    with pytest.raises(KafkaFailure, match="denied"):
        retry_settling(call, patience_s=30, clock=clock, sleep=clock.sleep)
    assert calls == [1] and clock.sleeps == []


def test_other_exceptions_are_not_retried() -> None:
    clock = FakeClock()
    call, calls = failing([ValueError("bad offset")])
    with pytest.raises(ValueError, match="bad offset"):
        retry_settling(call, patience_s=30, clock=clock, sleep=clock.sleep)
    assert calls == [1]
