"""Every client keeps a known topic's metadata through a broker failover. librdkafka forgets a
topic whose metadata is older than `metadata.max.age.ms`, which defaults to three refresh
intervals: 1.5 s with precast's 500 ms refresh. A kill -9 of the active controller outlasted
that, producers marked their topics unknown and held every record of every partition until the
metadata came back (issue 36)."""

from precast.kafka.config import admin_config, consumer_config, producer_config
from precast.settings import KafkaSettings

# Longer than any failover measured (leaders move 5-6 s after a controller kill), with room.
FAILOVER_S = 60


def _configs(settings: KafkaSettings) -> list[dict]:
    return [producer_config(settings), consumer_config(settings, "g"), admin_config(settings)]


def test_a_known_topic_outlives_any_failover_in_every_client():
    for conf in _configs(KafkaSettings()):
        refresh = conf["topic.metadata.refresh.interval.ms"]
        assert conf["metadata.max.age.ms"] >= FAILOVER_S * 1000
        assert conf["metadata.max.age.ms"] > 3 * refresh  # not librdkafka's derived default


def test_the_operator_may_still_choose_another_age():
    mine = KafkaSettings(extra={"metadata.max.age.ms": 5_000})
    assert all(c["metadata.max.age.ms"] == 5_000 for c in _configs(mine))


def test_librdkafka_accepts_the_configuration():
    import confluent_kafka

    conf = producer_config(KafkaSettings(bootstrap_servers="127.0.0.1:1"))
    confluent_kafka.Producer(conf).flush(0)
