"""Cluster checks and topic management against the topic contracts in `schemas.topics`."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import confluent_kafka
from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

from precast.errors import TopicContractError, Unreachable
from precast.kafka.config import admin_config
from precast.kafka.errors import (
    AUTHENTICATION_CODES,
    KafkaFailure,
    build_client,
    failure,
    is_refusal,
    principal_of,
    refused,
)
from precast.kafka.retry import retry_settling
from precast.kafka.types import TopicPartitionOffset
from schemas.topics import TopicSpec

# Probes must fail with one line, not a page of librdkafka connection errors.
_quiet = logging.getLogger("precast.kafka.probe")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


@dataclass(frozen=True)
class TopicReport:
    name: str
    action: str  # "created" | "ok" | "drift"
    detail: str = ""


@dataclass(frozen=True)
class GroupInfo:
    group_id: str
    state: str  # e.g. "STABLE", "EMPTY", "PREPARING_REBALANCE"
    members: int
    assigned: tuple[TopicPartitionOffset, ...]  # partitions its members hold now

    def consumes(self, topic: str) -> bool:
        return any(tp.topic == topic for tp in self.assigned)


@dataclass(frozen=True)
class PartitionReplicas:
    partition: int
    leader: int  # broker (node) id; -1 while no leader is elected
    replicas: tuple[int, ...]
    in_sync: tuple[int, ...]


class Admin:
    def __init__(self, settings: Any, *, quiet: bool = True) -> None:
        self._settings = settings
        self._client_errors: list[confluent_kafka.KafkaError] = []
        self._a = build_client(
            AdminClient,
            "admin client",
            {**admin_config(settings), "error_cb": self._on_client_error},
            logger=_quiet if quiet else logging.getLogger("precast.kafka.librdkafka"),
        )

    def _on_client_error(self, err: confluent_kafka.KafkaError) -> None:
        if len(self._client_errors) < 16:
            self._client_errors.append(err)

    def wait_reachable(self, timeout: float | None = None) -> int:
        """Block until the cluster answers a metadata request; return the broker count. A
        cluster that answers but refuses these credentials (or this TLS setup) raises
        `AccessRefused`, not `Unreachable`: waiting longer would not help."""
        timeout = self._settings.connect_timeout_s if timeout is None else timeout
        self._client_errors.clear()
        try:
            md = self._a.list_topics(timeout=timeout)
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            self._a.poll(0)  # serves error_cb: why the connections failed
            for seen in self._client_errors:
                if seen.name() in AUTHENTICATION_CODES:
                    raise refused(seen.name(), self._settings, detail=seen.str()) from None
            down = any("Connection refused" in e.str() for e in self._client_errors)
            hint = (
                " (it accepts connections but no PLAINTEXT client: does it want TLS or SASL? "
                "PRECAST_KAFKA__SECURITY_PROTOCOL)"
                if self._settings.security_protocol == "PLAINTEXT"
                and self._client_errors
                and not down
                else ""
            )
            raise Unreachable(
                "Kafka broker",
                self._settings.bootstrap_servers,
                f"no metadata within {timeout:g}s: {err.name()}{hint}",
            ) from None
        return len(md.brokers)

    def _failure(
        self, err: confluent_kafka.KafkaError, what: str, action: str, resource: str
    ) -> KafkaFailure:
        """A refusal as `AccessRefused` naming `action` on `resource`, anything else as the
        usual `KafkaFailure`."""
        if is_refusal(err.name()):
            return refused(err.name(), self._settings, action, resource)
        return KafkaFailure(f"{what}: {err.str()}", code=err.name())

    def topic_partitions(self, timeout: float = 10.0) -> dict[str, int]:
        md = self._a.list_topics(timeout=timeout)
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}

    def ensure_topics(self, specs: list[TopicSpec], timeout: float = 30.0) -> list[TopicReport]:
        """Create missing topics; refuse when an existing one has another partition count."""
        existing = self.topic_partitions(timeout)
        self._check_partitions(specs, existing)
        missing = [s for s in specs if s.name not in existing]
        reports: list[TopicReport] = []
        raced: list[TopicSpec] = []  # created by someone else after our metadata snapshot
        if missing:
            futures = self._a.create_topics(
                [
                    NewTopic(s.name, s.partitions, s.replication_factor, config=dict(s.config))
                    for s in missing
                ],
                operation_timeout=timeout,
                request_timeout=timeout,
            )
            for s in missing:
                try:
                    futures[s.name].result()
                    reports.append(TopicReport(s.name, "created"))
                except confluent_kafka.KafkaException as exc:
                    err = exc.args[0]
                    if err.code() != confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
                        raise self._failure(
                            err, f"create topic {s.name}", "create", s.name
                        ) from None
                    raced.append(s)
        visible = self._wait_visible([s.name for s in missing], timeout) if missing else existing
        self._check_partitions(raced, visible)
        present = [s for s in specs if s.name in existing] + raced
        reports += [TopicReport(s.name, "ok") for s in present]
        reports.extend(self._config_drift(present, timeout))
        order = {s.name: i for i, s in enumerate(specs)}
        return sorted(reports, key=lambda r: (order[r.name], r.action))

    @staticmethod
    def _check_partitions(specs: list[TopicSpec], existing: dict[str, int]) -> None:
        for s in specs:
            if s.name in existing and existing[s.name] != s.partitions:
                raise TopicContractError(
                    f"topic {s.name} has {existing[s.name]} partitions but its contract says "
                    f"{s.partitions}; device co-partitioning needs them equal (recreate the topic "
                    f"or set PRECAST_TOPICS__PARTITIONS={existing[s.name]})"
                )

    def _wait_visible(self, names: list[str], timeout: float) -> dict[str, int]:
        """Metadata lags topic creation a little; wait until every name is listed."""
        deadline = time.monotonic() + timeout
        while True:
            parts = self.topic_partitions(timeout)
            if all(n in parts for n in names) or time.monotonic() > deadline:
                return parts
            time.sleep(0.1)

    def partition_replicas(self, topic: str, timeout: float = 10.0) -> list[PartitionReplicas]:
        """Leader, replicas and in-sync replicas of each partition, from cluster metadata."""
        md = self._a.list_topics(topic, timeout=timeout).topics[topic]
        return [
            PartitionReplicas(p.id, p.leader, tuple(p.replicas), tuple(p.isrs))
            for p in sorted(md.partitions.values(), key=lambda p: p.id)
        ]

    def wait_fully_replicated(self, topics: list[str], replicas: int, timeout: float) -> float:
        """Seconds until every partition of `topics` has a leader and `replicas` in-sync
        replicas (a restarted broker has caught up); TimeoutError after `timeout` seconds."""
        t0 = time.monotonic()
        while True:
            try:
                layouts = [self.partition_replicas(t, timeout=5) for t in topics]
                # an unknown topic is listed with no partitions: not "all of them replicated"
                if all(layouts) and all(
                    p.leader >= 0 and len(p.in_sync) == replicas for ps in layouts for p in ps
                ):
                    return time.monotonic() - t0
            except (confluent_kafka.KafkaException, KeyError):
                pass  # metadata may time out, or miss a topic, while a broker is down
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"{topics} not at {replicas} in-sync replicas after {timeout}s")
            time.sleep(0.5)

    def topic_config(self, topic: str, timeout: float = 10.0) -> dict[str, str]:
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        result = self._a.describe_configs([res], request_timeout=timeout)[res].result()
        return {k: v.value for k, v in result.items()}

    def _config_drift(self, specs: list[TopicSpec], timeout: float) -> list[TopicReport]:
        if not specs:
            return []
        resources = [ConfigResource(ConfigResource.Type.TOPIC, s.name) for s in specs]
        futures = self._a.describe_configs(resources, request_timeout=timeout)
        out = []
        for spec, res in zip(specs, resources, strict=True):
            actual = {k: v.value for k, v in futures[res].result().items()}
            diffs = [
                f"{k}={actual.get(k)!r} (contract {v!r})"
                for k, v in spec.config.items()
                if str(actual.get(k)) != str(v)
            ]
            if diffs:
                out.append(TopicReport(spec.name, "drift", ", ".join(diffs)))
        return out

    def delete_topics(self, names: list[str], timeout: float = 30.0) -> None:
        if not names:
            return
        futures = self._a.delete_topics(names, operation_timeout=timeout, request_timeout=timeout)
        for name, fut in futures.items():
            try:
                fut.result()
            except confluent_kafka.KafkaException as exc:
                err = exc.args[0]
                if err.code() != confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise self._failure(err, f"delete topic {name}", "delete", name) from None

    def create_topic(
        self,
        name: str,
        partitions: int,
        config: dict[str, str] | None = None,
        replication_factor: int = 1,
        timeout: float = 30.0,
    ) -> None:
        """Create one topic outside the contract catalog (tests, scratch topics)."""
        fut = self._a.create_topics(
            [NewTopic(name, partitions, replication_factor, config=config or {})],
            operation_timeout=timeout,
            request_timeout=timeout,
        )[name]
        try:
            fut.result()
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            raise self._failure(err, f"create topic {name}", "create", name) from None
        self._wait_visible([name], timeout)

    # -- consumer groups and offsets (lag, the replay guard) ------------------------------------
    def _group(self, name: str) -> str:
        """A group as the broker knows it: a process's name for it in this deployment."""
        return f"{self.settings.group_prefix or ''}{name}"

    def consumer_groups(self, timeout: float = 10.0, *, every: bool = False) -> list[GroupInfo]:
        """Every consumer group of this deployment (its names without `group_prefix`, as the
        processes name them) with its state and what its members are assigned now; `every`:
        every group the cluster shows this principal, by their full names (a guard that must
        see any reader, whoever runs it)."""
        mine = "" if every else self.settings.group_prefix or ""
        try:
            listed = self._a.list_consumer_groups(request_timeout=timeout).result()
            ids = [g.group_id for g in listed.valid if g.group_id.startswith(mine)]
            if not ids:
                return []
            described = self._a.describe_consumer_groups(ids, request_timeout=timeout)
            out = []
            for gid in ids:
                d = described[gid].result()
                parts = tuple(
                    TopicPartitionOffset(tp.topic, tp.partition)
                    for m in d.members
                    for tp in (m.assignment.topic_partitions or [])
                )
                state = str(getattr(d.state, "name", d.state))
                out.append(GroupInfo(gid.removeprefix(mine), state, len(d.members), parts))
            return sorted(out, key=lambda g: g.group_id)
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            raise self._failure(err, "describe consumer groups", "describe", "") from None

    def delete_consumer_groups(self, group_ids: list[str], timeout: float = 10.0) -> None:
        """Remove groups that are done (e.g. a finished backfill's own group)."""
        if not group_ids:
            return
        group_ids = [self._group(g) for g in group_ids]
        for gid, fut in self._a.delete_consumer_groups(group_ids, request_timeout=timeout).items():
            try:
                fut.result()
            except confluent_kafka.KafkaException as exc:
                err = exc.args[0]
                if err.name() not in ("GROUP_ID_NOT_FOUND", "NON_EMPTY_GROUP"):
                    raise self._failure(err, f"delete group {gid}", "delete", gid) from None

    def committed_offsets(self, group_id: str, timeout: float = 10.0) -> list[TopicPartitionOffset]:
        """The group's committed next-offsets, for every partition it has committed on."""
        group_id = self._group(group_id)
        req = [ConsumerGroupTopicPartitions(group_id)]
        try:
            res = self._a.list_consumer_group_offsets(req, request_timeout=timeout)[
                group_id
            ].result()
        except confluent_kafka.KafkaException as exc:
            err = exc.args[0]
            raise self._failure(err, f"offsets of group {group_id}", "describe", group_id) from None
        return sorted(
            (
                TopicPartitionOffset(tp.topic, tp.partition, tp.offset)
                for tp in res.topic_partitions
                if tp.offset >= 0
            ),
            key=lambda t: (t.topic, t.partition),
        )

    def end_offsets(
        self, parts: list[tuple[str, int]], timeout: float = 10.0
    ) -> dict[tuple[str, int], int]:
        """Latest offset (the next one to be written) of each partition, as read_committed sees it.
        Retries while leadership settles (a topic created a moment ago answers NOT_LEADER)."""
        if not parts:
            return {}
        req = {TopicPartition(t, p): OffsetSpec.latest() for t, p in parts}

        def ask() -> dict[tuple[str, int], int]:
            out = {}
            futures = self._a.list_offsets(
                req, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout
            )
            for tp, fut in futures.items():
                try:
                    out[(tp.topic, tp.partition)] = fut.result().offset
                except confluent_kafka.KafkaException as exc:
                    err = exc.args[0]
                    if is_refusal(err.name()):
                        raise refused(err.name(), self._settings, "describe", tp.topic) from None
                    raise failure(err, "end offsets") from None
            return out

        return retry_settling(ask, patience_s=timeout, interval_s=0.1, what="end offsets")

    @property
    def raw(self) -> AdminClient:
        return self._a

    @property
    def settings(self) -> Any:
        return self._settings

    @property
    def principal(self) -> str:
        """How the cluster knows this client (for messages; never the password)."""
        return principal_of(self._settings)
