"""Retry a Kafka call while a partition leader or a group coordinator settles.

A topic created a moment ago, a leader election or a coordinator move make the cluster answer
"not here, not yet" for a few hundred milliseconds. Those answers are expected and pass by
themselves; every other failure is real and is raised at once. `SETTLING_CODES` is the one list
of such answers (librdkafka error names, `KafkaFailure.code`); the client flags only some of
them as retriable, so both the flag and the list count. A fatal error never does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from precast.kafka.errors import KafkaFailure

T = TypeVar("T")

log = logging.getLogger("precast.kafka.retry")

SETTLING_CODES: frozenset[str] = frozenset(
    {
        # Partition leadership moving or not elected yet (a new topic, a broker restart).
        "NOT_LEADER_FOR_PARTITION",  # librdkafka's name before KIP-392
        "NOT_LEADER_OR_FOLLOWER",
        "LEADER_NOT_AVAILABLE",
        # A client whose metadata does not list a just-created topic or partition yet.
        "UNKNOWN_TOPIC_OR_PART",
        "_UNKNOWN_PARTITION",
        # A group coordinator moving or loading its offsets.
        "COORDINATOR_NOT_AVAILABLE",
        "NOT_COORDINATOR",
        "COORDINATOR_LOAD_IN_PROGRESS",
        # The request went to a broker that was busy with the above, or that was restarting
        # (its connection dropped: leadership moves elsewhere, or back when it returns).
        "_TIMED_OUT",
        "_TRANSPORT",
    }
)


def is_settling(exc: KafkaFailure) -> bool:
    """True for an answer that a settling cluster gives and that passes by itself."""
    return not exc.fatal and (exc.retriable or exc.code in SETTLING_CODES)


def retry_settling(
    call: Callable[[], T],
    *,
    patience_s: float,
    interval_s: float = 0.2,
    what: str = "",
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`call()`, again every `interval_s` while it raises a settling `KafkaFailure`, for up to
    `patience_s`; then the last failure is raised. Any other exception is raised at once."""
    deadline = clock() + patience_s
    while True:
        try:
            return call()
        except KafkaFailure as exc:
            if not is_settling(exc) or clock() >= deadline:
                raise
            log.info("%s: %s while the cluster settles; retrying", what or "kafka call", exc.code)
        sleep(interval_s)
