"""Who may do what on Kafka: each component's principal, the catalog topics it reads and writes,
and the consumer-group and transactional-id prefixes it uses (least privilege: nothing else).

`precast acls show | apply` and the secured local stack (`precast stack up --secure`) turn this
table into Kafka ACLs for one deployment prefix (`precast.kafka.access`); the secured end-to-end
tests run every component with exactly these. Pure data, no I/O (docs/security.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.topics import Topics

# Every role of the catalog (schemas.topics), for the operator tools that read anything.
_ALL_ROLES = (
    "heartbeats",
    "work_orders",
    "alarms",
    "device_context",
    "precompute_requests",
    "predictions",
    "read_hints",
    "shadow_predictions",
    "worker_state",
    "dead_letters",
    "audit_checkpoints",
    "presence",
)


@dataclass(frozen=True)
class ComponentAccess:
    """What one component's principal may do. Topic entries are catalog roles; `groups`,
    `transactional_ids` and `topic_prefixes` are name prefixes (Kafka PREFIXED ACLs), where
    `{prefix}` stands for the deployment's topic prefix and `{group}` for its group prefix
    (`KafkaSettings.group_prefix`: the topic prefix unless set otherwise), which every process
    puts before its consumer groups and faust app id. Every name starts with one of them, so
    two deployments on one cluster hold no grant on each other's names."""

    component: str
    description: str
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    create: tuple[str, ...] = ()  # catalog topics it may create (`topics ensure`, shadow topic)
    groups: tuple[str, ...] = ()
    transactional_ids: tuple[str, ...] = ()
    # Topics outside the catalog it owns completely (faust's changelog, scratch replay targets).
    topic_prefixes: tuple[str, ...] = ()
    describe_groups: bool = False  # list and describe the deployment's groups (lag, replay guard)
    delete_groups: tuple[str, ...] = ()  # group prefixes it may delete (a finished backfill)

    def topics(self, catalog: Topics, roles: tuple[str, ...]) -> list[str]:
        return [getattr(catalog, role).name for role in roles]

    def expand(self, names: tuple[str, ...], prefix: str, group: str | None = None) -> list[str]:
        return [n.format(prefix=prefix, group=prefix if group is None else group) for n in names]


COMPONENTS: dict[str, ComponentAccess] = {
    a.component: a
    for a in (
        ComponentAccess(
            "simulator",
            "precast-simulator: publishes device events",
            write=("heartbeats", "work_orders", "alarms"),
        ),
        ComponentAccess(
            "worker",
            "precast-worker: precomputes predictions",
            read=(
                "heartbeats",
                "work_orders",
                "alarms",
                "device_context",
                "precompute_requests",
                "read_hints",
                "worker_state",
            ),
            write=("predictions", "worker_state", "dead_letters"),
            groups=("{group}precast-workers", "{group}precast-restore-"),
            # `<prefix><group id>.<instance>` in exactly-once mode (workers.precompute.cli)
            transactional_ids=("{prefix}precast-workers",),
        ),
        ComponentAccess(
            "context",
            "precast-context (faust): per-device context",
            read=("work_orders", "alarms"),
            write=("device_context", "dead_letters"),
            groups=("{group}precast-context",),
            # faust's own topics: <app id>-<table>-changelog, <app id>-__assignor-__leader
            topic_prefixes=("{group}precast-context",),
        ),
        ComponentAccess(
            "api",
            "precast-api: materializer, board feed, lineage reads, precompute requests",
            read=("predictions", "device_context", "heartbeats", "work_orders", "alarms"),
            write=("precompute_requests", "read_hints", "dead_letters", "presence"),
            groups=("{group}precast-api",),
        ),
        ComponentAccess(
            "auditor",
            "precast-auditor: the predictions audit log",
            read=("predictions",),
            write=("audit_checkpoints", "presence"),
            groups=("{group}precast-auditor",),
        ),
        ComponentAccess(
            "drift",
            "precast-drift: the feature drift monitor",
            read=("heartbeats",),
            groups=("{group}precast-drift",),
        ),
        ComponentAccess(
            "ops",
            "precast (operator CLI): topics, replay, backfill, shadow, dead letters, purge, "
            "lag, rebuild, audit",
            read=_ALL_ROLES,
            # purge markers and backfills (predictions), replays and redrives (each record back
            # to the catalog topic it was rejected from), shadow runs
            write=(
                "heartbeats",
                "work_orders",
                "alarms",
                "device_context",
                "precompute_requests",
                "read_hints",
                "predictions",
                "shadow_predictions",
                "dead_letters",  # a backfill dead-letters what it cannot read, as workers do
            ),
            create=_ALL_ROLES,
            groups=(
                "{group}precast-ops-",
                "{group}precast-backfill-",
                "{group}precast-shadow-",
                "{group}precast-restore-",
            ),
            topic_prefixes=("{prefix}scratch.",),
            describe_groups=True,
            delete_groups=("{group}precast-backfill-",),
        ),
    )
}


@dataclass(frozen=True, order=True)
class Grant:
    """One ALLOW ACL. `resource` is topic, group, transactional_id or cluster; `pattern`
    literal or prefixed; `operation` a Kafka ACL operation in lower case (read, write,
    create, delete, describe, describe_configs, all). Kafka lets read, write and delete imply
    describe, so describe is granted on its own only for listing the deployment's groups."""

    principal: str
    resource: str
    pattern: str
    name: str
    operation: str


def grants(
    access: ComponentAccess, catalog: Topics, principal: str, group_prefix: str | None = None
) -> list[Grant]:
    """The ACLs `principal` needs to run `access.component` against this catalog (and this
    group prefix; None: the catalog's topic prefix, as the processes default to)."""
    prefix = catalog.heartbeats.name.removesuffix("heartbeats")
    group = prefix if group_prefix is None else group_prefix
    out = [
        Grant(principal, "topic", "literal", t, "read") for t in access.topics(catalog, access.read)
    ]
    out += [
        Grant(principal, "topic", "literal", t, "write")
        for t in access.topics(catalog, access.write)
    ]
    for t in access.topics(catalog, access.create):
        out += [
            Grant(principal, "topic", "literal", t, "create"),
            Grant(principal, "topic", "literal", t, "describe_configs"),
        ]
    out += [
        Grant(principal, "group", "prefixed", g, "read")
        for g in access.expand(access.groups, prefix, group)
    ]
    out += [
        Grant(principal, "transactional_id", "prefixed", t, "write")
        for t in access.expand(access.transactional_ids, prefix)
    ]
    out += [
        Grant(principal, "topic", "prefixed", t, "all")
        for t in access.expand(access.topic_prefixes, prefix, group)
    ]
    if access.describe_groups:
        # Only this deployment's groups: ListGroups answers with those the caller may describe.
        # An empty group prefix (bare names, `group_prefix=""`) can only mean every group.
        scope = ("prefixed", group) if group else ("literal", "*")
        out.append(Grant(principal, "group", *scope, "describe"))
    out += [
        Grant(principal, "group", "prefixed", g, "delete")
        for g in access.expand(access.delete_groups, prefix, group)
    ]
    return sorted(set(out))


def principal_for(component: str, overrides: dict[str, str] | None = None) -> str:
    """`User:<component>` unless the deployment names it otherwise (`--principal C=User:x`)."""
    return (overrides or {}).get(component, f"User:{component}")
