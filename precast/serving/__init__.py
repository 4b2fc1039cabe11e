"""The serving store: the newest prediction per device, shared by the read API (materializer
and read path) and the SRE tools (purge, rebuild). Two implementations with one API:

- `MemoryStore` — the embedded default (no Redis configured), one per process;
- `RedisStore` — shared by API replicas and tools; newest-wins by a Lua compare-and-set.

API (both): `get`, `get_many`, `put_if_newer`, `put_many_if_newer` (→ STORED / OLDER /
EXPIRED / FUTURE per item), `delete`, `purge(predicate)`, `iterate`. Build entries from predictions
records with `entry_from_prediction`, leases (schemas.leases) with `lease_from_record` and
`put_leases`. Ordering: `schemas.predictions.supersedes`.
What the applications need of a store is written down as protocols (`ServingStore`,
`LocalView`, `SharedStore`, `AsyncReader`, in `protocols.py`).
See docs/api.md ("Serving store").
"""

from precast.serving.entry import (
    Entry,
    Extension,
    InvalidPrediction,
    Terms,
    decode,
    encode,
    entry_from_prediction,
    prediction_item,
)
from precast.serving.leases import Lease, LeaseBook, lease_from_record
from precast.serving.memory import MemoryStore
from precast.serving.protocols import AsyncReader, LocalView, ServingStore, SharedStore
from precast.serving.redis_store import AsyncRedisReader, RedisStore
from precast.serving.result import EXPIRED, FUTURE, OLDER, STORED

__all__ = [
    "EXPIRED",
    "FUTURE",
    "OLDER",
    "STORED",
    "AsyncReader",
    "AsyncRedisReader",
    "Entry",
    "Extension",
    "InvalidPrediction",
    "Lease",
    "LeaseBook",
    "LocalView",
    "MemoryStore",
    "RedisStore",
    "ServingStore",
    "SharedStore",
    "Terms",
    "decode",
    "encode",
    "entry_from_prediction",
    "lease_from_record",
    "prediction_item",
]
