"""Kafka security without a broker: the faust/aiokafka options the context aggregator builds from
the same settings as every librdkafka client, how a refusal reads, and the least-privilege
table the ACLs come from. (Against a real secured broker: tests/integration/test_secure_*.)"""

from __future__ import annotations

import ssl

import pytest

from opsctl.stack.tls import make
from precast.errors import ConfigError
from precast.kafka.errors import AccessRefused, refused
from precast.settings import KafkaSettings
from schemas.access import COMPONENTS, grants, principal_for
from schemas.topics import catalog
from workers.context.faust_config import connection_options


def test_plaintext_is_the_broker_list_and_client_id_only():
    opts = connection_options(KafkaSettings(bootstrap_servers="a:1,b:2", client_id="ctx-1"))
    assert opts == {"broker": "kafka://a:1;kafka://b:2", "broker_client_id": "ctx-1"}


def test_sasl_ssl_carries_credentials_and_a_context_trusting_the_ca(tmp_path):
    tls = make(tmp_path)
    opts = connection_options(
        KafkaSettings(
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username="context",
            sasl_password="pw-0123456789",
            ssl_ca_location=str(tls.ca),
        )
    )
    creds = opts["broker_credentials"]
    assert creds.username == "context" and creds.password == "pw-0123456789"
    assert creds.mechanism.value == "SCRAM-SHA-512" and creds.protocol.value == "SASL_SSL"
    ctx = creds.ssl_context
    assert isinstance(ctx, ssl.SSLContext) and ctx.check_hostname
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.get_ca_certs()
    assert "pw-0123456789" not in repr(creds)


def test_extra_overrides_and_switches_are_honoured_like_librdkafka(tmp_path):
    tls = make(tmp_path)
    opts = connection_options(
        KafkaSettings(
            security_protocol="SASL_SSL",
            sasl_username="u",
            sasl_password="p",
            ssl_ca_location=str(tls.ca),
            extra={
                "sasl.mechanism": "SCRAM-SHA-256",
                "ssl.endpoint.identification.algorithm": "none",
                "client.id": "from-extra",
                "request.timeout.ms": 30000,
            },
        )
    )
    assert opts["broker_credentials"].mechanism.value == "SCRAM-SHA-256"
    assert not opts["broker_credentials"].ssl_context.check_hostname
    assert opts["broker_client_id"] == "from-extra" and opts["broker_request_timeout"] == 30.0


def test_security_settings_aiokafka_cannot_apply_are_refused_not_dropped(caplog):
    with pytest.raises(ConfigError, match="ssl.engine.id"):
        connection_options(
            KafkaSettings(security_protocol="SSL", extra={"ssl.engine.id": "pkcs11"})
        )
    with pytest.raises(ConfigError, match="GSSAPI"):
        connection_options(
            KafkaSettings(security_protocol="SASL_PLAINTEXT", sasl_mechanism="GSSAPI")
        )
    with pytest.raises(ConfigError, match="SASL_USERNAME"):
        connection_options(KafkaSettings(security_protocol="SASL_SSL"))
    # a tuning property without a counterpart: one warning naming it, never its value
    with caplog.at_level("WARNING", logger="precast.context"):
        connection_options(KafkaSettings(extra={"socket.keepalive.enable": "value-xyz"}))
    assert "socket.keepalive.enable" in caplog.text and "value-xyz" not in caplog.text


def test_a_refusal_names_the_principal_the_operation_and_the_resource_never_the_password():
    s = KafkaSettings(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="worker",
        sasl_password="hunter2-hunter2",
    )
    denied = refused("TOPIC_AUTHORIZATION_FAILED", s, "read", "precast.heartbeats")
    assert isinstance(denied, AccessRefused) and denied.exit_code == 6
    assert str(denied).startswith("Kafka refused user 'worker' (SCRAM-SHA-512) to read topic")
    assert "'precast.heartbeats'" in str(denied)
    group = refused("GROUP_AUTHORIZATION_FAILED", s, "use", "precast-workers")
    assert "consumer group 'precast-workers'" in str(group)
    wrong = refused("_AUTHENTICATION", s, detail="SASL authentication error: invalid credentials")
    assert "refused to authenticate user 'worker'" in str(wrong)
    tls = refused("_SSL", s, detail="sasl_ssl://h:1/b: SSL handshake failed: certificate verify "
                  "failed (after 6ms in state SSL_HANDSHAKE)")  # fmt: skip
    assert "TLS with Kafka" in str(tls) and "certificate verify failed" in str(tls)
    for e in (denied, group, wrong, tls):
        assert "hunter2" not in str(e)


def test_least_privilege_each_component_writes_only_what_it_produces():
    cat = catalog("p.")
    writes = {
        name: {g.name for g in grants(a, cat, principal_for(name)) if g.operation == "write"}
        for name, a in COMPONENTS.items()
    }
    assert writes["simulator"] == {"p.heartbeats", "p.work-orders", "p.alarms"}
    assert writes["drift"] == set() and writes["auditor"] == {"p.audit-checkpoints", "p.presence"}
    # only the workers (and the ops tools: purge markers, backfills) write answers
    assert {n for n, w in writes.items() if "p.predictions" in w} == {"worker", "ops"}
    # nobody but the aggregator writes context (the ops tools redrive into it)
    assert {n for n, w in writes.items() if "p.device-context" in w} == {"context", "ops"}
    # no component but the tools may create topics or see every group
    creators = {n for n, a in COMPONENTS.items() if a.create or a.describe_groups}
    assert creators == {"ops"}
    for name, a in COMPONENTS.items():
        assert all(g.principal == f"User:{name}" for g in grants(a, cat, principal_for(name)))
        assert not any(
            g.operation == "all" and g.pattern == "literal" for g in grants(a, cat, "User:x")
        )


def _matches(g, name: str) -> bool:
    return name.startswith(g.name) if g.pattern == "prefixed" else g.name in (name, "*")


def test_every_acl_resource_carries_the_deployment_prefix():
    """Issue 36, deliverable 6: no grant of one deployment names anything outside its prefix."""
    for prefix in ("p.", "team-b.prod."):
        for name, a in COMPONENTS.items():
            for g in grants(a, catalog(prefix), principal_for(name)):
                assert g.name.startswith(prefix), g
                assert not (g.pattern == "prefixed" and g.name == ""), g


def test_two_deployments_grant_nothing_on_each_others_names():
    """What one deployment's processes name (topics, groups, transactional ids, faust's app
    topics) matches no grant of the other, whatever the component."""
    a, b = catalog("a."), catalog("b.")
    names_b = [t.name for t in b] + [
        "b.precast-workers",
        "b.precast-workers.0",
        "b.precast-restore-1f",
        "b.precast-context-0123abcd",
        "b.precast-context-0123abcd-table-changelog",
        "b.precast-api-1",
        "b.precast-auditor",
        "b.precast-drift",
        "b.precast-ops-lag-1",
        "b.precast-backfill-1",
        "b.scratch.replay",
    ]
    for name, access in COMPONENTS.items():
        for g in grants(access, a, principal_for(name)):
            assert not any(_matches(g, n) for n in names_b), (g, name)


def test_a_group_prefix_of_its_own_moves_the_group_grants_only():
    cat = catalog("p.")
    ops = grants(COMPONENTS["ops"], cat, "User:ops", group_prefix="g-")
    groups = {g.name for g in ops if g.resource == "group"}
    assert groups and all(n.startswith("g-") for n in groups)
    assert all(g.name.startswith("p.") for g in ops if g.resource == "topic")
    bare = grants(COMPONENTS["ops"], cat, "User:ops", group_prefix="")
    assert any(g.name == "*" and g.operation == "describe" for g in bare)


def test_processes_name_groups_in_their_deployments_namespace():
    from precast.kafka.config import consumer_config
    from precast.kafka.consumer import Consumer
    from precast.settings import CommonSettings

    s = CommonSettings(topics={"prefix": "team-b."})
    assert s.kafka.group_prefix == "team-b."
    c = Consumer(s.kafka, "precast-workers")
    try:
        assert c.group_id == "team-b.precast-workers"
    finally:
        c.close()
    # "" keeps the bare names (and the offsets committed under them)
    bare = CommonSettings(topics={"prefix": "team-b."}, kafka={"group_prefix": ""})
    assert bare.kafka.group_prefix == ""
    assert consumer_config(bare.kafka, "precast-workers")["group.id"] == "precast-workers"
