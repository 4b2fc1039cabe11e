"""Kafka ACLs and SCRAM users through the admin API, and the start-up check that a component's
principal holds what `schemas.access` says it needs (so a missing ACL is one line at start, not
a stalled consumer). Used by `precast acls`, the secured local stack and the tests."""

from __future__ import annotations

from typing import Any

import confluent_kafka
from confluent_kafka import TopicCollection
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from precast.kafka.admin import Admin
from precast.kafka.errors import AccessRefused, KafkaFailure, refused
from schemas.access import ComponentAccess, Grant
from schemas.topics import Topics

_RESOURCES = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "transactional_id": ResourceType.TRANSACTIONAL_ID,
    "cluster": ResourceType.BROKER,
}
_PATTERNS = {"literal": ResourcePatternType.LITERAL, "prefixed": ResourcePatternType.PREFIXED}
_OPERATIONS = {
    "read": AclOperation.READ,
    "write": AclOperation.WRITE,
    "create": AclOperation.CREATE,
    "delete": AclOperation.DELETE,
    "describe": AclOperation.DESCRIBE,
    "describe_configs": AclOperation.DESCRIBE_CONFIGS,
    "all": AclOperation.ALL,
}


def _args(g: Grant) -> tuple[Any, ...]:
    """What AclBinding and AclBindingFilter take, in order, for one ALLOW from any host."""
    return (
        _RESOURCES[g.resource],
        g.name,
        _PATTERNS[g.pattern],
        g.principal,
        "*",
        _OPERATIONS[g.operation],
        AclPermissionType.ALLOW,
    )


def _binding(g: Grant) -> AclBinding:
    return AclBinding(*_args(g))


def _grant(b: AclBinding) -> Grant | None:
    names = {v: k for k, v in _RESOURCES.items()}
    patterns = {v: k for k, v in _PATTERNS.items()}
    ops = {v: k for k, v in _OPERATIONS.items()}
    if b.permission_type != AclPermissionType.ALLOW or b.restype not in names:
        return None
    if b.resource_pattern_type not in patterns or b.operation not in ops:
        return None
    return Grant(
        b.principal,
        names[b.restype],
        patterns[b.resource_pattern_type],
        b.name,
        ops[b.operation],
    )


def apply_grants(admin: Admin, grants: list[Grant], timeout: float = 30.0) -> int:
    """Create the ACLs (creating one that exists changes nothing); returns how many were sent."""
    if not grants:
        return 0
    bindings = [_binding(g) for g in grants]
    futures = admin.raw.create_acls(bindings, request_timeout=timeout)
    for b, fut in futures.items():
        try:
            fut.result()
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            raise _as_failure(admin, err, f"create ACL on {b.name}") from None
    return len(bindings)


def revoke_grants(admin: Admin, grants: list[Grant], timeout: float = 30.0) -> int:
    """Delete exactly these ACLs; returns how many matched."""
    if not grants:
        return 0
    filters = [AclBindingFilter(*_args(g)) for g in grants]
    deleted = 0
    for f, fut in admin.raw.delete_acls(filters, request_timeout=timeout).items():
        try:
            deleted += len(fut.result())
        except confluent_kafka.KafkaException as exc:
            raise _as_failure(admin, exc.args[0], f"delete ACL on {f.name}") from None
    return deleted


def existing_grants(
    admin: Admin, principal: str | None = None, timeout: float = 30.0
) -> list[Grant]:
    """The ALLOW ACLs on the cluster (of one principal when given), as `Grant`s."""
    # None matches anything in a filter; the client's stubs type these as str only.
    flt = AclBindingFilter(
        ResourceType.ANY,
        None,  # type: ignore[arg-type]
        ResourcePatternType.ANY,
        principal,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    try:
        found = admin.raw.describe_acls(flt, request_timeout=timeout).result()
    except confluent_kafka.KafkaException as exc:
        raise _as_failure(admin, exc.args[0], "describe ACLs") from None
    return sorted(g for b in found if (g := _grant(b)) is not None)


def upsert_scram_user(
    admin: Admin,
    user: str,
    password: str,
    *,
    mechanism: str = "SCRAM-SHA-512",
    timeout: float = 30.0,
) -> None:
    """Create the SCRAM user or give it a new password (rotation: clients that connect after
    this need the new one; connections already open stay authenticated)."""
    mech = (
        ScramMechanism.SCRAM_SHA_512
        if mechanism == "SCRAM-SHA-512"
        else ScramMechanism.SCRAM_SHA_256
    )
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, 8192), password.encode())
    for name, fut in admin.raw.alter_user_scram_credentials(
        [upsert], request_timeout=timeout
    ).items():
        try:
            fut.result()
        except confluent_kafka.KafkaException as exc:
            raise _as_failure(admin, exc.args[0], f"set SCRAM credentials of {name}") from None


def _as_failure(admin: Admin, err: confluent_kafka.KafkaError, what: str) -> KafkaFailure:
    if err.name().endswith("AUTHORIZATION_FAILED"):
        return refused(err.name(), admin.settings, what.split(" ", 1)[0], what.split(" ", 1)[-1])
    return KafkaFailure(f"{what}: {err.str()}", code=err.name())


def missing_access(
    admin: Admin, access: ComponentAccess, catalog: Topics, timeout: float = 10.0
) -> list[str]:
    """What of `access`'s topics this client's principal may not do, from the broker's own
    answer (DescribeTopics with authorized operations). Empty when everything is allowed or
    the cluster has no authorizer (it reports no operations then)."""
    wanted: dict[str, set[AclOperation]] = {}
    for t in access.topics(catalog, access.read):
        wanted.setdefault(t, set()).add(AclOperation.READ)
    for t in access.topics(catalog, access.write):
        wanted.setdefault(t, set()).add(AclOperation.WRITE)
    if not wanted:
        return []
    futures = admin.raw.describe_topics(
        TopicCollection(sorted(wanted)), request_timeout=timeout, include_authorized_operations=True
    )
    missing = []
    for topic, fut in futures.items():
        try:
            allowed = fut.result().authorized_operations
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            if err.name() == "TOPIC_AUTHORIZATION_FAILED":
                allowed = []
            elif err.name() == "UNKNOWN_TOPIC_OR_PART":
                missing.append(f"topic {topic} does not exist (run `precast topics ensure`)")
                continue
            else:
                raise KafkaFailure(
                    f"describe topic {topic}: {err.str()}", code=err.name()
                ) from None
        if allowed is None:  # no authorizer on this cluster
            return []
        have = set(allowed)
        if AclOperation.ALL in have:
            continue
        for op in sorted(wanted[topic] - have, key=lambda o: o.name):
            missing.append(f"{'read' if op == AclOperation.READ else 'write to'} topic {topic}")
    return missing


def require_access(admin: Admin, access: ComponentAccess, catalog: Topics) -> None:
    """`AccessRefused` naming everything missing (one line), before the component starts."""
    missing = missing_access(admin, access, catalog)
    refusals = [m for m in missing if "does not exist" not in m]
    if refusals:
        raise AccessRefused(
            f"Kafka refuses the {access.component} principal ({admin.principal}): "
            f"{'; '.join(refusals)} (grant them: `precast acls apply`, docs/security.md)",
            code="TOPIC_AUTHORIZATION_FAILED",
        )


def connect_as(settings: Any, component: str) -> Admin:
    """What every entry point does first: the cluster answers, takes these credentials, and this
    principal holds the topic ACLs `component` needs (schemas.access); one line otherwise."""
    from schemas.access import COMPONENTS

    admin = Admin(settings.kafka)
    admin.wait_reachable()
    require_access(admin, COMPONENTS[component], settings.topics.catalog())
    return admin
