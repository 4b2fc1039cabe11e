"""Validity leases: how a worker keeps the answers of quiet devices valid without publishing each
one again (docs/workers.md, "Validity leases"; docs/architecture.md).

Two parts, both on the predictions topic:

- an answer that may be extended carries `LeaseTerms` (`PredictionSet.lease`): the partition
  it belongs to, the worker generation that published it, and `until_ms`, past which no lease
  extends it (the backstop that bounds every failure mode: a device whose state a worker lost,
  a fenced generation, a bug);
- a `ValidityLease` record, keyed `#lease:<partition>` (no device ID starts with `#`) and
  produced to that partition after the answers it covers, says: generation `generation`
  checked every device of the partition whose answer it holds against that device's data up
  to at least `certified_at_ms`, and none of their answers could have changed; so each such
  answer is valid until `valid_until_ms` (= certified_at + horizon, as a republished answer
  would be).

The rule every store applies (`precast.serving.leases.extension_until`): a lease extends an answer when the answer has
terms, on the same partition, of a generation not newer than the lease's, and the lease's end
is later than the answer's own validity; the result never passes the answer's `until_ms`.
Leases of one partition are ordered by (generation, certified_at_ms, produced_at_ms): a store
keeps the newest, so an older or a fenced generation's lease arriving late changes nothing.
A device that stops sending gets one last per-device record *without* terms (its answer,
valid until its own data time + horizon), published before the lease that no longer covers it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.events import EpochMs

LEASE_SCHEMA_VERSION: Literal[1] = 1
# Record key of a partition's lease on the predictions topic: never a device ID (those start
# with a letter or digit, schemas.events.DEVICE_ID_PATTERN), so compaction keeps the newest
# lease per partition beside the newest answer per device.
LEASE_KEY_PREFIX = b"#lease:"


def lease_key(partition: int) -> bytes:
    return LEASE_KEY_PREFIX + b"%d" % partition


def is_lease_key(key: bytes | None) -> bool:
    return key is not None and key.startswith(LEASE_KEY_PREFIX)


LeaseOrder = tuple[int, int, int]


def lease_order(generation: int, certified_at_ms: int, produced_at_ms: int) -> LeaseOrder:
    """Newest-wins among the leases of one partition: generation, then certification, then
    production time. Strictly newer only replaces (a duplicate changes nothing)."""
    return (generation, certified_at_ms, produced_at_ms)


class LeaseTerms(BaseModel):
    """On an answer: which leases may extend it, and until when at most."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: int = Field(ge=0, description="the predictions partition (= the device's)")
    generation: int = Field(
        ge=0, description="the worker generation that published it; leases of it or a later one"
    )
    until_ms: EpochMs = Field(description="no lease extends the answer past this time")


class ValidityLease(BaseModel):
    """One partition's validity extension (value of the `#lease:<partition>` record)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = LEASE_SCHEMA_VERSION
    kind: Literal["validity_lease"] = "validity_lease"
    partition: int = Field(ge=0)
    generation: int = Field(
        ge=0, description="the publishing worker's generation for this partition (grows)"
    )
    certified_at_ms: EpochMs = Field(
        description="every covered device's answer was checked against its data up to this time"
    )
    valid_until_ms: EpochMs = Field(description="covered answers are valid until then")
    produced_at_ms: EpochMs
    devices: int = Field(ge=0, description="answers covered when it was published (information)")
