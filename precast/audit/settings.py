"""The audit log's settings block (`PRECAST_AUDIT__*`), shared by the auditor process and the
`precast audit` CLI so one deployment environment configures both the same way."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from precast.http.settings import HttpLimits


class AuditSettings(HttpLimits):
    """The log and the auditor's HTTP API, which has the read API's connection limits."""

    db_path: Path = Field(
        default=Path(".precast/audit/log.db"), description="the log's SQLite database (WAL)"
    )
    key_path: Path = Field(
        default=Path(".precast/audit/signing.key"),
        description="the auditor's Ed25519 signing key (note format); created with mode 0600 "
        "and a .pub verifier key beside it for a new log only: a log is bound to its key",
    )
    public_key: Path | None = Field(
        default=None,
        description="file with the verifier key `precast audit` trusts; unset = KEY_PATH + .pub",
    )
    origin: str = Field(
        default="precast.local/predictions-audit",
        description="the log's name: first line of every checkpoint and the key's name",
    )
    checkpoint_interval_s: float = Field(
        default=1.0, gt=0, le=60, description="a signed checkpoint at least this often"
    )
    consume_batch: int = Field(
        default=5_000, ge=1, le=100_000, description="records appended per transaction, at most"
    )
    host: str = Field(
        default="127.0.0.1", description="the auditor's HTTP API (checkpoints, proofs, probes)"
    )
    port: int = Field(default=8100, ge=1, le=65535, description="the auditor's HTTP API port")
    group_id: str = Field(
        default="precast-auditor",
        description="consumer group the auditor commits to, for `precast lag` only: the log's "
        "own store holds the offsets it resumes from",
    )

    @field_validator("origin")
    @classmethod
    def _origin_is_a_key_name(cls, v: str) -> str:
        if not v or any(c.isspace() or c == "+" for c in v):
            raise ValueError("must be non-empty, without spaces or '+' (it names the signing key)")
        return v

    def verifier_path(self) -> Path:
        return self.public_key or self.key_path.with_name(self.key_path.name + ".pub")
