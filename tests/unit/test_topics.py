from dataclasses import fields

from schemas.topics import Topics, catalog


def test_catalog_contract():
    t = catalog("p.", partitions=12, replication_factor=3)
    names = [s.name for s in t]
    assert len(names) == len(set(names)) == len(fields(Topics)) == 12
    assert all(n.startswith("p.") for n in names)
    assert t.predictions.cleanup_policy == "compact"
    assert t.device_context.cleanup_policy == "compact"
    assert t.worker_state.cleanup_policy == "compact" and t.worker_state.keyed_by_device
    assert {s.cleanup_policy for s in t.events()} == {"delete"}
    assert all("retention.ms" in s.config for s in t.events())
    # co-partitioning: every device-keyed topic has the same partition count
    assert {s.partitions for s in t if s.keyed_by_device} == {12}
    assert t.heartbeats.config["min.insync.replicas"] == "2"
    assert t.by_name("p.alarms") is t.alarms
    # read hints are advice with a short life, keyed by device like the events they steer
    assert t.read_hints.keyed_by_device and t.read_hints.cleanup_policy == "delete"
    # presence: one record per assign-based reader instance, the newest kept
    assert t.presence.cleanup_policy == "compact" and not t.presence.keyed_by_device


def test_the_catalog_is_built_from_the_topic_settings():
    from precast.settings import TopicSettings

    topics = TopicSettings(prefix="site-a.", partitions=12, replication_factor=3).catalog()
    assert topics.predictions.name == "site-a.predictions"
    assert {t.partitions for t in topics} == {12}
    assert {t.replication_factor for t in topics} == {3}
    assert all(t.config["min.insync.replicas"] == "2" for t in topics)
