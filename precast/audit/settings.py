"""The audit log's settings block (`PRECAST_AUDIT__*`), shared by the auditor process and the
`precast audit` CLI so one deployment environment configures both the same way."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from precast.settings import Section


class AuditSettings(Section):
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
    # The same connection and header limits as the read API (docs/api.md, "Capacity and
    # hostile clients"); fewer connections by default: a few auditors, not every UI.
    backlog: int = Field(
        default=1_024, ge=16, le=65_535, description="listen backlog of the auditor's HTTP API"
    )
    max_connections: int = Field(
        default=1_024,
        ge=16,
        le=1_000_000,
        description="connections the auditor's HTTP API serves at once (past it: 503)",
    )
    keepalive_s: float = Field(
        default=5.0, gt=0, le=3600, description="an idle keep-alive connection is closed after this"
    )
    header_timeout_s: float = Field(
        default=15.0,
        gt=0,
        le=3600,
        description="a connection that has not sent a whole request head in this time is closed",
    )
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
