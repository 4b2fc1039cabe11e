"""Settings of a read-API process (built once, in `consumer_api.cli`).

`ApiOptions` is the one place every option and its default is declared: the environment reads
it flat (`PRECAST_API__BOARD_MAX_ROWS`, ...), and the read path and the edge take it whole.
The other rooms get their own section, cut from it by `materialize_options()`,
`board_options()` and `speculation_options()`: no defaults there, only the values a room uses,
in the units it uses them."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from precast.errors import ConfigError
from precast.http.settings import HttpLimits
from precast.settings import CommonSettings, EdgeSettings, text_list
from precast.tokens import check_token


class ApiOptions(HttpLimits):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    server: Literal["granian", "uvicorn"] = Field(
        default="granian",
        description="HTTP server running the app in this process (docs/dependencies.md)",
    )
    group_id: str = Field(
        default="precast-api", description="prefix of each replica's own consumer group"
    )
    ready_max_lag: int = Field(
        default=0,
        ge=0,
        description="ready once the predictions topic is read up to this many records of the end seen at start",
    )
    grace_s: float = Field(
        default=30.0,
        ge=0,
        le=86_400,
        description="entries stay this long after valid_until (served per `expired`), then expire",
    )
    expired: Literal["stale", "fallback"] = Field(
        default="stale",
        description="past valid_until: serve the entry marked stale, or the fallback",
    )
    default_strategy: str | None = Field(
        default=None,
        description="the fallback answer's strategy (unset: the fleet spec's default_label)",
    )
    local_view: bool = Field(
        default=True,
        description=(
            "serve reads from an in-process view (fed by this replica's "
            "materializer); false = one Redis GET per read"
        ),
    )
    batch_max: int = Field(
        default=100, ge=1, le=10_000, description="most devices in one batch GET or prefetch hint"
    )
    sse_max_devices: int = Field(
        default=200, ge=1, le=10_000, description="most devices one event stream may watch"
    )
    sse_max_streams: int = Field(
        default=1_000,
        ge=1,
        le=100_000,
        description="most open event streams per replica; past it a new stream gets 503 and Retry-After",
    )
    sse_keepalive_s: float = Field(
        default=15.0, gt=0, le=300, description="comment line sent on idle event streams"
    )
    hint_interval_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="how often the devices read, prefetched or watched are sent to the workers (read hints)",
    )
    hot_for_s: float = Field(
        default=30.0,
        ge=0,
        le=3_600,
        description="a read, prefetch or open stream keeps a device hot for the speculation policy this long",
    )
    request_window_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="at most one precompute request per device per window (miss, expiry, prefetch)",
    )
    auth_token: SecretStr | None = Field(
        default=None,
        description="one bearer token with every scope (read, prefetch, board); empty or "
        "placeholder values are refused; prefer TOKENS_FILE (docs/security.md)",
    )
    tokens_file: Path | None = Field(
        default=None,
        description="named tokens with scopes, stored as SHA-256 digests (`precast api-token "
        "add`); re-read when it changes and on SIGHUP, so tokens rotate without a restart",
    )
    consume_batch: int = Field(
        default=5_000, ge=1, le=100_000, description="records per materializer poll"
    )
    background_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description=(
            "CPU priority (nice) of the materializer and its Kafka clients, below the reads' "
            "(0: the same); docs/api.md, Reads first"
        ),
    )
    gate: bool = Field(
        default=True,
        description=(
            "once caught up, read the predictions topic through a gate process of its own (at "
            "BACKGROUND_NICE), which rejects and dead-letters what is not a prediction: a burst "
            "of poison never holds the reads' GIL, and runs on a core they leave free "
            "(docs/api.md, The gate)"
        ),
    )
    consume_wait_ms: int = Field(
        default=20,
        ge=1,
        le=1_000,
        description="longest a materializer poll waits when nothing arrives (it returns at the first prediction)",
    )
    max_body_bytes: int = Field(
        default=65_536, ge=1024, le=10_485_760, description="largest accepted POST body"
    )
    board: bool = Field(
        default=True,
        description="serve the operations-center board (/board/, /v1/board/*; docs/board.md)",
    )
    board_history_depth: int = Field(
        default=10, ge=0, le=1000, description="answers kept per device for the board's history"
    )
    board_history_devices: int = Field(
        default=10_000,
        ge=0,
        le=10_000_000,
        description="devices with a history; past it the least recently updated is forgotten",
    )
    board_max_rows: int = Field(
        default=50_000, ge=1, le=1_000_000, description="most rows in one /v1/board/fleet page"
    )
    board_queue_max: int = Field(
        default=10_000,
        ge=1,
        le=1_000_000,
        description="changed devices a board stream may have pending; past it the board reloads",
    )
    board_frame_ms: int = Field(
        default=25, ge=0, le=5_000, description="least time between two frames of a board stream"
    )
    # Connection capacity (backlog, max_connections, keepalive_s, header_timeout_s): HttpLimits.
    body_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="a POST body not received in this time gets 408 body_timeout",
    )
    # Per-client limits (per replica): a client is its bearer token and its address.
    client_key: Literal["token_and_address", "token", "address"] = Field(
        default="token_and_address",
        description=(
            "what a client is for per-client limits: each of its token and its address has "
            "its own allowance, or only one of them (behind a proxy: token)"
        ),
    )
    trusted_proxies: list[str] = Field(
        default=[],
        description=(
            "CIDR ranges (or single addresses) of reverse proxies whose X-Forwarded-For names "
            'the client (its right-most entry); JSON list, e.g. ["172.16.0.0/12"]'
        ),
    )
    allowed_hosts: list[str] = Field(
        default=["localhost", "127.0.0.1", "[::1]"],
        description=(
            "Host header values answered (any port; the names clients and proxies use); any "
            'other gets 421, so DNS rebinding cannot read through a browser; ["*"] allows '
            "any; /healthz and /readyz answer every host; JSON list"
        ),
    )
    client_max_streams: int = Field(
        default=20, ge=1, le=100_000, description="most open event streams per client"
    )
    client_prefetch_per_s: float = Field(
        default=200.0, gt=0, le=1_000_000, description="prefetched device IDs per second per client"
    )
    client_prefetch_burst: int = Field(
        default=500,
        ge=1,
        le=10_000_000,
        description="prefetched device IDs a client may send at once",
    )
    client_beacons_per_s: float = Field(
        default=2.0, gt=0, le=100_000, description="beacon requests per second per client"
    )
    client_beacon_burst: int = Field(
        default=20, ge=1, le=1_000_000, description="beacon requests a client may send at once"
    )
    max_clients: int = Field(
        default=100_000,
        ge=100,
        le=10_000_000,
        description="clients tracked for limits and beacons; the least recent are forgotten",
    )
    # Speculative work budget, shared by all replicas through Redis (per replica without it).
    precompute_budget_per_s: float = Field(
        default=500.0,
        gt=0,
        le=1_000_000,
        description="ceiling on precompute requests per second from all replicas together",
    )
    precompute_burst: int = Field(
        default=1_000,
        ge=1,
        le=10_000_000,
        description="precompute requests the budget allows at once",
    )
    beacon_max_ms: float = Field(
        default=60_000.0,
        gt=0,
        le=3_600_000,
        description="beacon values above this are clipped to it (implausible for one view)",
    )

    def materialize_options(self) -> MaterializeOptions:
        return MaterializeOptions(
            group_id=self.group_id,
            local_view=self.local_view,
            grace_ms=int(self.grace_s * 1000),
            batch=self.consume_batch,
            wait_s=self.consume_wait_ms / 1000,
            ready_max_lag=self.ready_max_lag,
            nice=self.background_nice,
            gate=self.gate,
        )

    def board_options(self) -> BoardOptions:
        return BoardOptions(
            enabled=self.board,
            group_id=self.group_id,
            default_strategy=self.default_strategy,
            serve_stale=self.expired == "stale",
            grace_ms=int(self.grace_s * 1000),
            history_depth=self.board_history_depth,
            history_devices=self.board_history_devices,
            max_rows=self.board_max_rows,
            queue_max=self.board_queue_max,
            frame_s=self.board_frame_ms / 1000,
        )

    def speculation_options(self) -> SpeculationOptions:
        return SpeculationOptions(
            request_window_ms=int(self.request_window_s * 1000),
            hot_for_ms=int(self.hot_for_s * 1000),
            budget_per_s=self.precompute_budget_per_s,
            burst=self.precompute_burst,
        )

    @field_validator("auth_token")
    @classmethod
    def _real_token(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None:
            try:
                check_token(v.get_secret_value(), "the token")
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return v

    _list_of_names = field_validator("trusted_proxies", "allowed_hosts", mode="before")(text_list)

    @field_validator("trusted_proxies")
    @classmethod
    def _cidr_ranges(cls, v: list[str]) -> list[str]:
        for entry in v:
            try:
                ipaddress.ip_network(entry.strip(), strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not an address or CIDR range") from None
        return v

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError('empty: no request would be answered; ["*"] allows any Host')
        for h in v:
            if not h or any(c.isspace() or c in "/@?#," for c in h) or h.count(":") == 1:
                raise ValueError(f"{h!r}: a host name or address without a port or a scheme")
        return v

    @model_validator(mode="after")
    def _no_open_doors(self) -> ApiOptions:
        # On loopback only the machine's own users reach the API; anywhere else, a token.
        if not is_loopback(self.host) and self.auth_token is None and self.tokens_file is None:
            raise ValueError(
                f"the API listens on {self.host}, beyond loopback, without a token: set "
                "PRECAST_API__TOKENS_FILE (or PRECAST_API__AUTH_TOKEN); docs/security.md"
            )
        return self


@dataclass(frozen=True)
class MaterializeOptions:
    """What the materializer (consumer_api.materialize) uses of the options."""

    group_id: str  # prefix of this replica's own consumer group
    local_view: bool  # feed an in-process view (the read path's store)
    grace_ms: int  # entries stay this long past valid_until
    batch: int  # records per poll
    wait_s: float  # longest wait of a poll
    ready_max_lag: int
    nice: int = 0  # CPU priority of its thread and its Kafka clients' (precast.priority)
    gate: bool = False  # read through a gate process (consumer_api.materialize.gate)


@dataclass(frozen=True)
class BoardOptions:
    """What the board (consumer_api.board) uses of the options."""

    enabled: bool
    group_id: str  # prefix of the board feed's and the lineage reads' consumer groups
    # a row's answer as the read path serves it
    default_strategy: str | None
    serve_stale: bool
    grace_ms: int
    history_depth: int
    history_devices: int
    max_rows: int  # most rows in one fleet page
    queue_max: int  # changed devices a board stream may have pending
    frame_s: float  # least time between two frames of a board stream


@dataclass(frozen=True)
class SpeculationOptions:
    """What speculation (consumer_api.speculation) uses of the options."""

    request_window_ms: int  # one precompute request per device per window
    hot_for_ms: int  # how long a read hint keeps a device hot
    budget_per_s: float  # precompute requests a second, all replicas together
    burst: int


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and "localhost"; anything else (0.0.0.0, a name, an interface) is not."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ApiSettings(CommonSettings):
    api: ApiOptions = ApiOptions()
    edge: EdgeSettings = EdgeSettings()
