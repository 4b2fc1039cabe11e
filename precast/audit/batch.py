"""One batch of records turned into what the store appends: the pure half of the auditor's
append step, shared with the tests that build logs without a broker."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from precast.audit.compact import CompactRange
from precast.audit.hashing import leaf_hashes
from precast.audit.leaf import Leaf, encode_leaf, leaf_of
from precast.audit.store import LeafRow, LogStore

if TYPE_CHECKING:  # the pure half needs no Kafka client loaded
    from precast.kafka.types import KafkaMessage


@dataclass
class Batch:
    leaves: list[Leaf]
    rows: list[LeafRow]
    tree: CompactRange  # the frontier after the batch
    nodes: list[tuple[int, int, bytes]]
    ends: dict[int, int]  # next offset per partition


def prepare(
    topic: str,
    msgs: Sequence[KafkaMessage],
    tree: CompactRange,
    on_invalid: Callable[[BaseException, KafkaMessage], object] | None = None,
) -> Batch:
    """`on_invalid(why, record)` for each record whose leaf is `invalid` (a reader's count)."""
    if on_invalid is None:
        leaves = [leaf_of(topic, m.partition(), m.offset(), m.key(), m.value()) for m in msgs]
    else:
        leaves = [
            leaf_of(topic, m.partition(), m.offset(), m.key(), m.value(), _bound(on_invalid, m))
            for m in msgs
        ]
    datas = [encode_leaf(x) for x in leaves]
    hashes = leaf_hashes(datas)
    after = CompactRange(tree.size, list(tree.hashes))  # the caller keeps it once stored
    nodes: list[tuple[int, int, bytes]] = []
    after.extend(hashes, nodes)
    rows = [
        (d, h, x.partition, x.offset, x.device, x.computed_at_ms)
        for d, h, x in zip(datas, hashes, leaves, strict=True)
    ]
    ends = {x.partition: x.offset + 1 for x in leaves}
    return Batch(leaves, rows, after, nodes, ends)


def _bound(
    hook: Callable[[BaseException, KafkaMessage], object], m: KafkaMessage
) -> Callable[[BaseException], object]:
    return lambda exc: hook(exc, m)


def append_records(store: LogStore, topic: str, msgs: Sequence[KafkaMessage]) -> Batch:
    """Append records to a store in one transaction (the auditor does this per consumed batch)."""
    batch = prepare(topic, msgs, store.frontier())
    store.append(batch.rows, batch.tree, batch.nodes, batch.ends)
    return batch
