"""The connection limits every precast HTTP server takes from its settings block (the read API's
`PRECAST_API__*`, the auditor's `PRECAST_AUDIT__*`): docs/api.md, "Capacity and hostile
clients". The servers' own defaults (granian: 128 connections) let 128 idle sockets stop one."""

from __future__ import annotations

from pydantic import Field

from precast.settings import Section


class HttpLimits(Section):
    backlog: int = Field(
        default=4_096,
        ge=16,
        le=65_535,
        description="listen backlog (the kernel caps it at net.core.somaxconn)",
    )
    max_connections: int = Field(
        default=16_384,
        ge=16,
        le=1_000_000,
        description=(
            "connections served at once (granian backpressure, uvicorn limit_concurrency); "
            "each needs a file descriptor, the soft RLIMIT_NOFILE is raised to the hard limit"
        ),
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
