"""The local stack's Kafka cluster ID must be one StorageTool's parser takes as a value."""

import base64
import uuid

from opsctl.stack import kafka_node


def test_cluster_id_never_starts_with_a_dash(monkeypatch):
    dash_first = uuid.UUID(bytes=b"\xf8" + bytes(15))  # base64 of 0xF8... starts with "-"
    fine = uuid.UUID(bytes=bytes(range(1, 17)))
    drawn = iter([dash_first, dash_first, fine])
    monkeypatch.setattr(kafka_node.uuid, "uuid4", lambda: next(drawn))
    assert base64.urlsafe_b64encode(dash_first.bytes).startswith(b"-")
    cid = kafka_node.new_cluster_id()
    assert cid == base64.urlsafe_b64encode(fine.bytes).decode().rstrip("=")
    assert len(cid) == 22 and not cid.startswith("-")


def test_random_cluster_ids_are_valid():
    ids = {kafka_node.new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(len(c) == 22 and not c.startswith("-") and "=" not in c for c in ids)
