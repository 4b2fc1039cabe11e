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


class AccessRefused(KafkaFailure):
    """The cluster refused this client: wrong credentials or certificate (authentication), or
    an operation its principal has no ACL for (authorization). One line names the principal,
    the operation and the resource; the process exits 6."""

    exit_code = 6


# librdkafka's names for refusals. Authentication: the client is not let in at all (wrong
# password, unknown user, a mechanism the listener does not offer). Authorization: it is in,
# but its principal lacks an ACL for what it asked.
AUTHENTICATION_CODES = frozenset(
    {
        "_AUTHENTICATION",
        "SASL_AUTHENTICATION_FAILED",
        "UNSUPPORTED_SASL_MECHANISM",
        "ILLEGAL_SASL_STATE",
        "_SSL",  # the TLS handshake failed: an unknown CA, a name mismatch, a refused certificate
    }
)
AUTHORIZATION_CODES = frozenset(
    {
        "TOPIC_AUTHORIZATION_FAILED",
        "GROUP_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
    }
)
_WHAT_WAS_REFUSED = {
    "TOPIC_AUTHORIZATION_FAILED": "topic",
    "GROUP_AUTHORIZATION_FAILED": "consumer group",
    "CLUSTER_AUTHORIZATION_FAILED": "cluster operation",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": "transactional id",
    "DELEGATION_TOKEN_AUTHORIZATION_FAILED": "delegation token",
}


def is_refusal(code: str) -> bool:
    return code in AUTHENTICATION_CODES or code in AUTHORIZATION_CODES


def principal_of(settings: Any) -> str:
    """How the cluster knows this client, for error lines (never the password)."""
    user = getattr(settings, "sasl_username", None)
    protocol = getattr(settings, "security_protocol", "PLAINTEXT")
    if user and protocol.startswith("SASL"):
        return f"user {user!r} ({getattr(settings, 'sasl_mechanism', None) or 'SASL'})"
    if protocol == "SSL" and getattr(settings, "ssl_certificate_location", None):
        return f"the certificate {settings.ssl_certificate_location}"
    return "this client (no credentials configured)"


def refused(
    code: str, settings: Any, action: str = "", resource: str = "", detail: str = ""
) -> AccessRefused:
    """An `AccessRefused` for librdkafka's `code`: `action` is what was asked ("read",
    "write to", "join"), `resource` the topic, group or id it was asked of; `detail` the
    client's own text (kept for TLS failures only: it says which check failed)."""
    who = principal_of(settings)
    where = getattr(settings, "bootstrap_servers", "?")
    if code == "_SSL":
        why = detail.split(": ", 1)[-1].split(" (after ", 1)[0][:240] if detail else "see the log"
        return AccessRefused(f"TLS with Kafka at {where} failed: {why}", code=code)
    if code in AUTHENTICATION_CODES:
        return AccessRefused(
            f"Kafka at {where} refused to authenticate "
            f"{who}: wrong or unknown credentials, or a SASL mechanism the listener does not offer",
            code=code,
        )
    kind = _WHAT_WAS_REFUSED.get(code, "resource")
    target = f" {kind} {resource!r}" if resource else f" a {kind}"
    return AccessRefused(
        f"Kafka refused {who} to {action}{target}: no ACL allows it (docs/security.md)",
        code=code,
    )


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
