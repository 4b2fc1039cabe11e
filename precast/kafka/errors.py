"""Kafka failures as precast exceptions; the librdkafka error code is kept as `.code`."""

from __future__ import annotations

from precast.errors import PrecastError


class KafkaFailure(PrecastError):
    """A Kafka client operation failed. `code` is librdkafka's error name (e.g. `_TRANSPORT`)."""

    exit_code = 3

    def __init__(self, message: str, *, code: str = "", fatal: bool = False, retriable: bool = False,
                 txn_requires_abort: bool = False) -> None:
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


def reason(exc: BaseException) -> str:
    """The message of a client exception: librdkafka's KafkaError text when it carries one."""
    err = exc.args[0] if exc.args else None
    return err.str() if hasattr(err, "str") else str(exc)
