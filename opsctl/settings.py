"""Settings of the operator app (`precast` CLI): the local stack and the SRE tools."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from precast.audit.settings import AuditSettings
from precast.settings import CommonSettings, EdgeSettings, KafkaSettings, Section, text_list


class StackSettings(Section):
    """The local development stack (Kafka and Redis started from this machine): one broker and
    one Redis by default; three KRaft brokers and/or a Redis Cluster on request."""

    home: Path = Path(".precast")
    kafka_version: str = "4.1.1"
    brokers: int = Field(
        default=1,
        description="Kafka nodes (combined broker/controller): 1, or 3 for a replicated "
        "cluster whose node i listens on kafka_port + 2i and controller_port + 2i",
    )
    kafka_port: int = Field(default=9092, ge=1, le=65535)
    controller_port: int = Field(default=9093, ge=1, le=65535)
    redis_port: int = Field(default=6379, ge=1, le=65535)
    prometheus: bool = Field(
        default=True,
        description="`precast stack up` and the demo also start Prometheus (Debian's package)",
    )
    prometheus_port: int = Field(
        default=9490,
        ge=1,
        le=65535,
        description="local Prometheus (not 9090, where Debian's package may run its own)",
    )
    redis_exporter_port: int = Field(
        default=9491,
        ge=1,
        le=65535,
        description="Redis exporter (Debian's prometheus-redis-exporter), started with Prometheus",
    )
    tracing: bool = Field(
        default=False,
        description="`precast stack up` also starts Jaeger (built from its Go module on first "
        "use) and the demo traces every process into it (docs/observability.md, Traces)",
    )
    jaeger_otlp_port: int = Field(
        default=4318, ge=1, le=65535, description="Jaeger's OTLP/HTTP receiver"
    )
    jaeger_query_port: int = Field(
        default=16686,
        ge=1,
        le=65534,
        description="Jaeger's query API (its gRPC query on the next port)",
    )
    jaeger_health_port: int = Field(default=13133, ge=1, le=65535)
    edge: bool = Field(
        default=False,
        description="`precast stack up --edge` also starts Varnish (with xkey) in front of the "
        "API replicas, with deploy/edge/precast.vcl (docs/api.md, Behind a cache or CDN)",
    )
    edge_port: int = Field(
        default=6091,
        ge=1,
        le=65535,
        description="the edge's HTTP port (not 6081: Debian's own varnish service may hold it)",
    )
    edge_admin_port: int = Field(
        default=6092, ge=1, le=65535, description="Varnish's admin port (loopback)"
    )
    edge_exporter_port: int = Field(
        default=9131, ge=1, le=65535, description="the edge's Prometheus exporter"
    )
    edge_backends: list[str] = Field(
        default=["127.0.0.1:8000"],
        description="the API replicas behind the edge, host:port each (JSON list)",
    )
    edge_storage: str = Field(
        default="malloc,256m", description="Varnish's cache storage (its -s argument)"
    )
    scrape_interval_s: float = Field(
        default=5.0, gt=0, le=300, description="how often the local Prometheus scrapes services"
    )
    kafka_heap: str = "768m"
    cluster_kafka_heap: str = Field(
        default="448m",
        description="heap of each node of a 3-broker stack (three JVMs share the machine)",
    )
    redis_cluster: bool = Field(
        default=False,
        description="start a Redis Cluster (3 masters + 3 replicas on redis_cluster_port ... "
        "+5) instead of the single Redis",
    )
    redis_cluster_port: int = Field(
        default=7000,
        ge=1,
        le=55530,
        description="first Redis Cluster port; each node also uses its port + 10000 (cluster bus)",
    )
    secure: bool = Field(
        default=False,
        description="`precast stack up --secure`: the secured Kafka (TLS, SASL/SCRAM, ACLs, no "
        "plaintext listener) under home/secure, beside the plaintext stack (docs/security.md)",
    )
    secure_kafka_port: int = Field(
        default=9192, ge=1, le=65535, description="SASL_SSL listener of the secured Kafka"
    )
    secure_controller_port: int = Field(
        default=9193,
        ge=1,
        le=65535,
        description="controller listener (mutual TLS) of the secured Kafka",
    )
    start_timeout_s: float = Field(default=90.0, gt=0)
    # Where resolved Kafka jars are kept, shared by every clone on this machine.
    jar_cache: Path = Path.home() / ".cache" / "precast" / "kafka"

    _backend_list = field_validator("edge_backends", mode="before")(text_list)

    @field_validator("edge_backends")
    @classmethod
    def _host_ports(cls, v: list[str]) -> list[str]:
        # They are written into VCL: a host name or address and a port, nothing else.
        if not v:
            raise ValueError("the edge needs at least one API replica (host:port)")
        for b in v:
            host, _, port = b.strip().rpartition(":")
            if not re.fullmatch(r"[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:]{2,45}\]", host) or not (
                port.isdigit() and 1 <= int(port) <= 65535
            ):
                raise ValueError(f"{b!r}: an API replica's host:port, e.g. 127.0.0.1:8000")
        return [b.strip() for b in v]

    @field_validator("brokers")
    @classmethod
    def _quorum_size(cls, v: int) -> int:
        # Two voters tolerate no failure, more than three need more ports than a laptop spares.
        if v not in (1, 3):
            raise ValueError("brokers must be 1 or 3")
        return v


class OpsSettings(Section):
    """The SRE tools (`precast replay | deadletters | purge | lag | rebuild | backfill`)."""

    state_dir: Path = Field(
        default=Path(".precast/ops"), description="where replay and redrive checkpoints are kept"
    )
    target_kafka: KafkaSettings | None = Field(
        default=None,
        description="cluster a replay writes to (JSON object of KAFKA fields, or "
        "PRECAST_OPS__TARGET_KAFKA__BOOTSTRAP_SERVERS etc.); unset = the source cluster",
    )
    chunk_records: int = Field(
        default=200_000,
        ge=100,
        le=10_000_000,
        description="most source records read between two checkpoints",
    )
    chunk_seconds: float = Field(
        default=2.0, gt=0, le=600, description="longest time between two checkpoints of a replay"
    )
    store_grace_s: float = Field(
        default=30.0,
        ge=0,
        le=86_400,
        description="grace after valid_until for entries the tools write to the "
        "serving store (keep equal to PRECAST_API__GRACE_S)",
    )


class ModelLocation(BaseModel):
    """Where the workers' models are, as `precast promote` needs it: the worker's own
    PRECAST_MODEL__REGISTRY (the worker's other model settings are its own, so ignored here)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    registry: Path | None = Field(
        default=None, description="the model registry folder `precast promote` writes ACTIVE in"
    )

    @field_validator("registry", mode="before")
    @classmethod
    def _empty_is_unset(cls, v: object) -> object:
        return None if v == "" else v


class StackCliSettings(CommonSettings):
    stack: StackSettings = StackSettings()
    edge: EdgeSettings = EdgeSettings()
    ops: OpsSettings = OpsSettings()
    audit: AuditSettings = AuditSettings()
    model: ModelLocation = ModelLocation()
