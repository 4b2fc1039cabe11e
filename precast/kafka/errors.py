"""Kafka failures as precast exceptions; the librdkafka error code is kept as `.code`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import confluent_kafka

from precast.errors import ConfigError, PrecastError

T = TypeVar("T")


class KafkaFailure(PrecastError):
    """A Kafka client operation failed. `code` is librdkafka's error name (e.g. `_TRANSPORT`)."""

    exit_code = 3

    def __init__(
        self,
        message: str,
        *,
        code: str = "",
        fatal: bool = False,
        retriable: bool = False,
        txn_requires_abort: bool = False,
    ) -> None:
        super().__init__(f"{message} [{code}]" if code else message)
        self.code = code
        self.fatal = fatal
        self.retriable = retriable
        self.txn_requires_abort = txn_requires_abort


class EmptyKeyError(PrecastError, ValueError):
    """Device-keyed records must carry a key: librdkafka sends keyless records to a random
    partition, which silently breaks co-partitioning by device."""

    exit_code = 2


class DeliveryFailed(KafkaFailure):
    """At least one produced record was not acknowledged by the broker."""


def failure(err: confluent_kafka.KafkaError, what: str) -> KafkaFailure:
    """A client error as a `KafkaFailure`, with its name and flags kept."""
    return KafkaFailure(
        f"{what}: {err.str()}",
        code=err.name(),
        fatal=err.fatal(),
        retriable=err.retriable(),
        txn_requires_abort=err.txn_requires_abort(),
    )


def build_client(factory: Callable[..., T], kind: str, *args: Any, **kwargs: Any) -> T:
    """`factory(*args, **kwargs)` for a confluent_kafka client class. librdkafka checks the whole
    configuration here (acks vs idempotence, transactional.id, pass-through properties): a
    refusal becomes one ConfigError line naming it, not a traceback."""
    try:
        return factory(*args, **kwargs)
    except (confluent_kafka.KafkaException, ValueError, TypeError) as exc:
        err = exc.args[0] if exc.args else None
        detail = err.str() if isinstance(err, confluent_kafka.KafkaError) else str(exc)
        raise ConfigError(f"Kafka {kind} configuration refused: {detail}") from None
