import pytest

from precast.errors import ConfigError
from precast.settings import CommonSettings, KafkaSettings, load


def test_nested_env_variables(monkeypatch):
    monkeypatch.setenv("PRECAST_KAFKA__BOOTSTRAP_SERVERS", "broker-1:9093,broker-2:9093")
    monkeypatch.setenv("PRECAST_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("PRECAST_KAFKA__SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("PRECAST_KAFKA__SASL_USERNAME", "svc")
    monkeypatch.setenv("PRECAST_KAFKA__SASL_PASSWORD", "s3cret")
    monkeypatch.setenv("PRECAST_REDIS__URL", "redis://cache:6380/2")
    s = load(CommonSettings)
    conf = s.kafka.client_config()
    assert conf["bootstrap.servers"] == "broker-1:9093,broker-2:9093"
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.password"] == "s3cret"
    assert s.redis.url == "redis://cache:6380/2"


def test_secrets_hidden_when_logged():
    k = KafkaSettings(sasl_password="s3cret", extra={"sasl.password": "other"})
    assert "s3cret" not in str(k.client_config(plaintext_secrets=False))
    assert "other" not in str(k.client_config(plaintext_secrets=False))
    assert "s3cret" not in repr(k)


def test_passthrough_wins():
    k = KafkaSettings(extra={"ssl.endpoint.identification.algorithm": "none", "client.id": "x"})
    conf = k.client_config()
    assert conf["ssl.endpoint.identification.algorithm"] == "none"
    assert conf["client.id"] == "x"


def test_unknown_nested_key_is_an_error():
    with pytest.raises(ConfigError, match="kafka.bootstrap"):
        load(CommonSettings, kafka={"bootstrap": "typo:9092"})


def test_invalid_value_names_the_env_variable(monkeypatch):
    monkeypatch.setenv("PRECAST_TOPICS__PARTITIONS", "0")
    with pytest.raises(ConfigError, match="PRECAST_TOPICS__PARTITIONS"):
        load(CommonSettings)


def test_settings_are_frozen():
    s = load(CommonSettings)
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error type varies by version
        s.kafka.bootstrap_servers = "x"  # type: ignore[misc]
