"""Settings shared by every precast process.

Each entry point builds exactly one settings object (a subclass of `CommonSettings`) and passes
it down; nothing reads the environment anywhere else. Environment variables use the prefix
`PRECAST_` and `__` between nesting levels, e.g. `PRECAST_KAFKA__BOOTSTRAP_SERVERS`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from precast.errors import ConfigError
from schemas.topics import Topics, catalog

S = TypeVar("S", bound=BaseSettings)

_SECRET_KEYS = ("sasl.password", "ssl.key.password", "ssl.keystore.password")


class Section(BaseModel):
    """A nested settings block: frozen, and unknown keys are an error rather than ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class KafkaSettings(Section):
    bootstrap_servers: str = "127.0.0.1:9092"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: SecretStr | None = None
    client_id: str = "precast"
    # Every consumer group (and the context aggregator's faust app id) starts with this, so that
    # deployments sharing a cluster neither join each other's groups nor need ACLs on each
    # other's names (schemas.access). None: the deployment's topic prefix (CommonSettings fills
    # it in); "" keeps the bare names of before issue 36 (and their committed offsets).
    group_prefix: str | None = None
    # Seconds a process waits for the first metadata answer before it gives up with one line.
    connect_timeout_s: float = Field(default=10.0, gt=0, le=300)
    # Raw librdkafka properties passed through unchanged (they win over ours), for anything
    # a managed cluster needs that is not modelled above.
    extra: dict[str, str | int | float | bool] = Field(default_factory=dict)

    def client_config(self, *, plaintext_secrets: bool = True) -> dict[str, Any]:
        """The librdkafka properties common to producers, consumers and admin clients."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
            "client.id": self.client_id,
        }
        optional = {
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password,
            "ssl.ca.location": self.ssl_ca_location,
            "ssl.certificate.location": self.ssl_certificate_location,
            "ssl.key.location": self.ssl_key_location,
            "ssl.key.password": self.ssl_key_password,
        }
        for key, value in optional.items():
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value() if plaintext_secrets else "***"
            conf[key] = value
        conf.update(self.extra)
        if not plaintext_secrets:
            for key in _SECRET_KEYS:
                if key in conf:
                    conf[key] = "***"
        return conf


class RedisSettings(Section):
    # Empty string means "no Redis": services that can fall back to memory do so.
    url: str = "redis://127.0.0.1:6379/0"
    connect_timeout_s: float = Field(default=5.0, gt=0, le=300)
    # Every key precast writes starts with this, so one Redis can host several deployments.
    key_prefix: str = "precast:"
    cluster: bool = Field(
        default=False,
        description="the URL names one node of a Redis Cluster (any node: the client finds "
        "the others); keys are hash-tagged per device",
    )

    @field_validator("key_prefix")
    @classmethod
    def _prefix_is_safe(cls, v: str) -> str:
        # Braces would make the prefix the Redis Cluster hash tag: every key in one slot.
        if not v or any(c in v for c in " *?[]{}\r\n"):
            raise ValueError(
                "key_prefix must be non-empty and free of spaces, braces and glob characters"
            )
        return v


class TopicSettings(Section):
    prefix: str = "precast."
    # Every device-keyed topic has this many partitions: co-partitioning by device hash depends
    # on it, and `topics ensure` refuses to run against a topic that differs.
    partitions: int = Field(default=6, ge=1, le=10_000)
    replication_factor: int = Field(default=1, ge=1, le=15)

    def catalog(self) -> Topics:
        """Every topic of this deployment, named and sized from these settings: the one way
        a process builds its catalog (`schemas.topics.catalog` stays the pure table)."""
        return catalog(self.prefix, self.partitions, self.replication_factor)


class FleetSettings(Section):
    spec: Path | None = Field(
        default=None,
        description="the fleet spec (TOML, docs/fleets.md) this process runs; unset: the "
        "built-in fleet (schemas/fleets/devices.toml)",
    )


class TracingSettings(Section):
    """OpenTelemetry traces (precast.telemetry.tracing): off by default and free when off."""

    enabled: bool = False
    # OTLP over HTTP: Jaeger (`precast stack up --tracing`) or any OpenTelemetry collector.
    endpoint: str = "http://127.0.0.1:4318/v1/traces"
    # Head sampling of new traces; a continued trace follows its parent's decision.
    sample_ratio: float = Field(default=1.0, ge=0, le=1)
    export_timeout_s: float = Field(default=5.0, gt=0, le=60)
    # None: each process names itself (precast-worker, precast-api, ...).
    service_name: str | None = None
    # Where a person opens a trace by its ID (the board links to it); "" shows the bare ID.
    ui_url: str = ""

    @field_validator("ui_url")
    @classmethod
    def _ui_url_is_http(cls, v: str) -> str:
        # It becomes a link on the board: nothing but http(s) (no javascript:, no data:).
        if v and not v.startswith(("http://", "https://")):
            raise ValueError("ui_url must start with http:// or https:// (or be empty)")
        return v


def text_list(cls: type, v: object) -> object:
    """A list setting given as text: JSON (the environment) or comma-separated (a compose file,
    a test); anything else passes to the field's own validation."""
    if isinstance(v, str):
        text = v.strip()
        if text.startswith("["):
            return json.loads(text)
        return [x.strip() for x in text.split(",") if x.strip()]
    return v


class EdgeSettings(Section):
    """An edge cache in front of the read API (Varnish with xkey: `precast stack up --edge`,
    deploy/edge/): where the API replicas and `precast purge` send purges (docs/api.md,
    "Behind a cache or CDN"). Empty: no edge, nothing is sent."""

    purge_urls: list[str] = Field(
        default=[],
        description="each edge node's http(s) URL; every purge goes to every one (JSON list); "
        "empty: no edge, nothing is sent",
    )
    purge_interval_ms: int = Field(
        default=100,
        ge=10,
        le=10_000,
        description="how long an API replica gathers the devices whose answer changed before "
        "one purge: the newest-wins bound at the edge is this plus the purge's round trip plus "
        "the 0.5 s a soft-purged copy stays usable",
    )
    purge_timeout_s: float = Field(
        default=2.0, gt=0, le=60, description="one purge request's timeout per edge node"
    )
    lease_ttl_s: int = Field(
        default=0,
        ge=0,
        le=300,
        description="an answer its partition's validity lease extends, now or when its own "
        "validity ends, may stay at the edge this long (s-maxage, surrogate key lp:N for "
        "partition N) while the replicas purge a partition's copies before its lease would "
        "lapse; 0: the edge keeps nothing past the answer's current validity (docs/api.md, "
        "Behind a cache or CDN)",
    )
    lease_guard_ms: int = Field(
        default=200,
        ge=50,
        le=10_000,
        description="a partition's leased copies are purged this long before its newest lease "
        "ends with no newer one stored (and at once when the lease's generation changes)",
    )

    _url_list = field_validator("purge_urls", mode="before")(text_list)

    @field_validator("purge_urls")
    @classmethod
    def _http_urls(cls, v: list[str]) -> list[str]:
        for url in v:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"{url!r}: an edge node's http(s) URL, e.g. http://127.0.0.1:6091")
        return [u.rstrip("/") for u in v]


class MetricsSettings(Section):
    # Port of the /metrics, /healthz and /readyz endpoints of non-HTTP services; 0 disables.
    host: str = "127.0.0.1"
    port: int = Field(default=0, ge=0, le=65535)


class CommonSettings(BaseSettings):
    """Base for each process's settings object; subclasses add their own section."""

    model_config = SettingsConfigDict(
        env_prefix="PRECAST_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    kafka: KafkaSettings = KafkaSettings()
    redis: RedisSettings = RedisSettings()
    topics: TopicSettings = TopicSettings()
    fleet: FleetSettings = FleetSettings()
    metrics: MetricsSettings = MetricsSettings()
    tracing: TracingSettings = TracingSettings()
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @model_validator(mode="after")
    def _groups_follow_the_topic_prefix(self) -> CommonSettings:
        if self.kafka.group_prefix is None:
            # Frozen: the one write, while the object is being built.
            kafka = self.kafka.model_copy(update={"group_prefix": self.topics.prefix})
            self.__dict__["kafka"] = kafka
        return self

    def redacted(self) -> dict[str, Any]:
        """A loggable view with secrets hidden."""
        return self.model_dump(mode="json")


def load(cls: type[S], **overrides: Any) -> S:
    """Build a settings object, turning validation errors into one readable `ConfigError`."""
    from pydantic import ValidationError

    try:
        return cls(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "settings"
        env = "PRECAST_" + "__".join(str(p).upper() for p in first["loc"])
        raise ConfigError(f"invalid setting {where} ({env}): {first['msg']}") from None
