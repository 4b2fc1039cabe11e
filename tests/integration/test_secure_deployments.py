"""Two deployments on one secured broker stay apart (issue 36, deliverable 6): each holds the ACLs
schemas/access.py grants for its own prefix, as principals of its own, and neither can read the
other's topics, join or describe the other's consumer groups. The control cases (each reads its
own topic in its own group) are there so that a refusal cannot pass by refusing everything."""

from __future__ import annotations

import secrets
import time
import uuid

import pytest

from precast.kafka import Admin, Consumer, Producer, TopicPartitionOffset
from precast.kafka.access import apply_grants, upsert_scram_user
from precast.kafka.errors import AccessRefused
from precast.settings import KafkaSettings
from schemas.access import COMPONENTS, grants
from schemas.topics import catalog

pytestmark = pytest.mark.slow


class Deployment:
    def __init__(self, stack, admin: Admin, prefix: str) -> None:
        self.stack, self.prefix = stack, prefix
        self.topics = catalog(prefix, 1)
        self.passwords: dict[str, str] = {}
        admin.ensure_topics(list(self.topics))
        for component in ("ops", "worker"):
            user = f"{prefix.rstrip('.')}-{component}"
            self.passwords[component] = secrets.token_urlsafe(18)
            upsert_scram_user(admin, user, self.passwords[component])
            apply_grants(admin, grants(COMPONENTS[component], self.topics, f"User:{user}"))

    def kafka(self, component: str, group_prefix: str | None = None) -> KafkaSettings:
        return KafkaSettings(
            bootstrap_servers=self.stack.bootstrap_servers,
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username=f"{self.prefix.rstrip('.')}-{component}",
            sasl_password=self.passwords[component],  # type: ignore[arg-type]
            ssl_ca_location=str(self.stack.security.tls.ca),
            group_prefix=self.prefix if group_prefix is None else group_prefix,
        )


def read(settings: KafkaSettings, group: str, topic: str, commit: bool = False) -> list:
    """The records of `topic` read in consumer group `group`; AccessRefused when refused."""
    c = Consumer(settings, group)
    try:
        c.subscribe([topic])
        got: list = []
        deadline = time.monotonic() + 45
        while not got and time.monotonic() < deadline:
            got = c.consume(10, 0.5)
        if got and commit:
            c.commit([TopicPartitionOffset(topic, m.partition(), m.offset() + 1) for m in got])
        return got
    finally:
        c.close()


@pytest.fixture
def pair(secure_stack):
    admin = Admin(secure_stack.settings_for("admin"))
    token = uuid.uuid4().hex[:8]
    a = Deployment(secure_stack, admin, f"depa{token}.")
    b = Deployment(secure_stack, admin, f"depb{token}.")
    p = Producer(secure_stack.settings_for("admin"))
    for d in (a, b):
        p.produce(d.topics.heartbeats.name, b"dev-1", f'{{"from":"{d.prefix}"}}'.encode())
    p.flush()
    yield a, b
    admin.delete_topics([t.name for d in (a, b) for t in d.topics])


def test_each_deployment_reads_its_own_topics_in_its_own_groups(pair):
    a, b = pair
    for d in (a, b):
        got = read(d.kafka("ops"), "precast-ops-own", d.topics.heartbeats.name, commit=True)
        assert [m.value() for m in got] == [f'{{"from":"{d.prefix}"}}'.encode()]


def test_neither_reads_the_others_topics(pair):
    a, b = pair
    for me, other in ((a, b), (b, a)):
        # in a group of its own, which it may use: the topic is what is refused
        for component, group in (("ops", "precast-ops-x"), ("worker", "precast-workers-x")):
            with pytest.raises(AccessRefused) as exc:
                read(me.kafka(component), group, other.topics.heartbeats.name)
            assert exc.value.code == "TOPIC_AUTHORIZATION_FAILED"


def test_neither_joins_the_others_groups(pair):
    a, b = pair
    for me, other in ((a, b), (b, a)):
        # Its own topic, but in the other deployment's group namespace: the group is refused.
        for component, group in (("ops", "precast-ops-own"), ("worker", "precast-workers")):
            with pytest.raises(AccessRefused) as exc:
                read(me.kafka(component, other.prefix), group, me.topics.heartbeats.name)
            assert exc.value.code == "GROUP_AUTHORIZATION_FAILED"


def test_neither_sees_the_others_groups_or_their_offsets(pair):
    a, b = pair
    for d in (a, b):  # each deployment's ops group exists with a committed offset
        read(d.kafka("ops"), "precast-ops-own", d.topics.heartbeats.name, commit=True)
    for me, other in ((a, b), (b, a)):
        mine = Admin(me.kafka("ops"))
        assert "precast-ops-own" in {g.group_id for g in mine.consumer_groups()}
        assert mine.committed_offsets("precast-ops-own")
        everything = Admin(me.kafka("ops", group_prefix=""))
        names = {g.group_id for g in everything.consumer_groups()}
        assert f"{me.prefix}precast-ops-own" in names
        assert not any(n.startswith(other.prefix) for n in names)
        with pytest.raises(AccessRefused):
            everything.committed_offsets(f"{other.prefix}precast-ops-own")
