"""compose/ cannot run here (no Docker engine), so check it by reading: every service, command,
port and PRECAST_* variable it names must exist in the code."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from auditor.settings import AuditorSettings
from consumer_api.settings import ApiSettings
from opsctl.settings import StackCliSettings
from producers.settings import SimulatorSettings
from tests.unit.compose_support import interpolate
from workers.settings import ContextSettings, DriftSettings, WorkerSettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "compose" / "docker-compose.yml").read_text())
NGINX = (ROOT / "compose" / "nginx.conf").read_text()
FILES = ["docker-compose.yml", "docker-compose.cluster.yml"]
# ${NAME}, ${NAME:-default}, ${NAME:?message} and the other forms compose interpolates
INTERPOLATED = re.compile(r"\$\{([A-Z0-9_]+)(:?[-?+])?([^}]*)\}")
SECRET = re.compile(r"TOKEN|PASSWORD|SECRET|KEY")
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
SETTINGS_OF = {
    "precast": StackCliSettings,
    "precast-simulator": SimulatorSettings,
    "precast-worker": WorkerSettings,
    "precast-api": ApiSettings,
    "precast-context": ContextSettings,
    "precast-drift": DriftSettings,
    "precast-auditor": AuditorSettings,
}
PRECAST_SERVICES = {
    n: s for n, s in COMPOSE["services"].items() if s.get("image", "").startswith("precast")
}
# Run once and exit (or on demand): no metrics to scrape.
ONE_SHOT = {"kafka-init", "proxy-tls", "ops"}


def commands(svc: dict) -> list[list[str]]:
    """The console-script command lines a service runs: its command, or each `precast ...`
    of a `sh -c` script, or a `python -m module` (as ["-m", module])."""
    cmd = svc["command"]
    if cmd[:2] == ["sh", "-c"]:
        return [
            part.split("|")[-1].split()
            for part in re.split(r"&&|\n", cmd[2])
            if part.split("|")[-1].split()[:1] == ["precast"]
        ]
    if cmd[:2] == ["python", "-m"]:
        return [["-m", cmd[2]]]
    return [cmd]


def resolve(model: type[BaseModel], env_name: str) -> bool:
    """Does PRECAST_A__B__C name a field path a.b.c of this settings model?"""
    parts = env_name.removeprefix("PRECAST_").lower().split("__")
    current: type[BaseModel] | None = model
    for part in parts:
        if current is None or part not in current.model_fields:
            return False
        ann = current.model_fields[part].annotation
        current = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    return True


def test_expected_services_exist():
    assert {"kafka", "redis", "simulator", "worker", "api", "kafka-init"} <= set(
        COMPOSE["services"]
    )
    assert COMPOSE["services"]["kafka"]["image"].startswith("apache/kafka:4.")


@pytest.mark.parametrize("name", sorted(PRECAST_SERVICES))
def test_commands_and_env_exist_in_code(name):
    import importlib

    svc = PRECAST_SERVICES[name]
    lines = commands(svc)
    assert lines, name
    for line in lines:
        if line[0] == "-m":
            assert hasattr(importlib.import_module(line[1]), "main"), line
        else:
            assert line[0] in SCRIPTS, f"{name}: {line[0]} is not a console script"
    command = lines[0][0]
    if command == "-m":
        return
    env = {k: v for k, v in interpolate(svc["environment"]).items() if k.startswith("PRECAST_")}
    unknown = [k for k in env if k.startswith("PRECAST_") and not resolve(SETTINGS_OF[command], k)]
    assert not unknown, f"{name}: {unknown} are not settings of {SETTINGS_OF[command].__name__}"
    # and they validate: values are of the right type for the field
    nested: dict = {}
    for key, value in env.items():
        parts = key.removeprefix("PRECAST_").lower().split("__")
        d = nested
        for p in parts[:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = value
    SETTINGS_OF[command](**nested)


def test_ports_and_healthchecks_match_settings():
    api = COMPOSE["services"]["api"]
    port = api["environment"]["PRECAST_API__PORT"]
    assert "ports" not in api  # reached through the proxy and the edge cache only
    assert "proxy_pass http://cache:6081;" in NGINX
    backends = (ROOT / "deploy" / "edge" / "compose-backends.vcl").read_text()
    assert f'.host = "api";\n    .port = "{port}";' in backends
    auditor = COMPOSE["services"]["auditor"]["environment"]["PRECAST_AUDIT__PORT"]
    assert f"proxy_pass http://auditor:{auditor}/v1/checkpoint;" in NGINX
    assert f":{port}/readyz" in " ".join(api["healthcheck"]["test"])
    for name in ("simulator", "worker"):
        svc = COMPOSE["services"][name]
        mport = svc["environment"]["PRECAST_METRICS__PORT"]
        assert re.search(rf":{mport}/(healthz|readyz)", " ".join(svc["healthcheck"]["test"]))


def test_broker_address_matches_kafka_listener():
    host = COMPOSE["services"]["kafka"]["environment"]["KAFKA_ADVERTISED_HOST"]
    script = (ROOT / "compose" / "kafka-sasl.sh").read_text()
    assert "advertised.listeners=SASL_PLAINTEXT://$KAFKA_ADVERTISED_HOST:$PORT" in script
    assert "PORT=${KAFKA_PORT:-9092}" in script
    for name, svc in PRECAST_SERVICES.items():
        if name == "proxy-tls":
            continue  # no Kafka, no network
        env = svc["environment"]
        assert env["PRECAST_KAFKA__BOOTSTRAP_SERVERS"] == f"{host}:9092"
        assert env["PRECAST_KAFKA__SECURITY_PROTOCOL"] == "SASL_PLAINTEXT"


def test_dockerfile_copies_every_package():
    dockerfile = (ROOT / "compose" / "Dockerfile").read_text()
    for pkg in ("precast", "schemas", "producers", "workers", "consumer_api", "opsctl", "auditor"):
        assert f"COPY {pkg} ./{pkg}" in dockerfile


def test_prometheus_scrapes_every_precast_service_and_loads_the_rules():
    prom = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.compose.yml").read_text())
    targets = {
        c["job_name"]: t
        for c in prom["scrape_configs"]
        for g in c["static_configs"]
        for t in g["targets"]
    }
    for name, svc in PRECAST_SERVICES.items():
        if name in ONE_SHOT:
            continue
        env = svc["environment"]
        port = (
            env.get("PRECAST_METRICS__PORT")
            or env.get("PRECAST_API__PORT")
            or env.get("PRECAST_AUDIT__PORT")
        )
        assert targets.get(f"precast-{name}") == f"{name}:{port}", name
    volumes = " ".join(COMPOSE["services"]["prometheus"]["volumes"])
    assert "../deploy/alerts:/etc/prometheus/rules" in volumes
    assert prom["rule_files"] == ["/etc/prometheus/rules/*.rules.yml"]
    grafana = " ".join(COMPOSE["services"]["grafana"]["volumes"])
    assert "../deploy/grafana/dashboards:/var/lib/grafana/dashboards" in grafana
    provider = yaml.safe_load(
        (ROOT / "deploy" / "grafana" / "provisioning" / "dashboards" / "precast.yml").read_text()
    )
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    datasource = yaml.safe_load(
        (
            ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
        ).read_text()
    )["datasources"][0]
    dashboards = list((ROOT / "deploy" / "grafana" / "dashboards").glob("*.json"))
    assert len(dashboards) >= 7
    for d in dashboards:
        assert f'"uid": "{datasource["uid"]}"' in d.read_text(), d.name


@pytest.mark.parametrize("name", FILES)
def test_required_secrets_fail_fast_when_unset(name):
    """A secret has no default: `${VAR:?why}` stops `docker compose up` with that message, where
    `${VAR:-change-me}` (or an empty `${VAR:-}`) would open a door."""
    text = (ROOT / "compose" / name).read_text()
    secrets = [m for m in INTERPOLATED.finditer(text) if SECRET.search(m.group(1))]
    assert secrets, "no secret is interpolated at all?"
    for m in secrets:
        assert m.group(2) == ":?" and m.group(3).strip(), f"{m.group(0)} must be ${{VAR:?why}}"
    assert "change-me" not in text and "admin/admin" not in text
    assert 'ANONYMOUS_ENABLED: "true"' not in text


@pytest.mark.parametrize("name", FILES)
def test_only_the_proxy_is_published_and_on_loopback_by_default(name):
    doc = yaml.safe_load((ROOT / "compose" / name).read_text())
    published = {n: s["ports"] for n, s in doc["services"].items() if "ports" in s}
    assert set(published) == {"proxy"}
    for port in published["proxy"]:
        m = INTERPOLATED.match(port)
        assert m and m.group(1) == "PRECAST_PUBLISH_ADDRESS" and m.group(2) == ":-", port
        assert m.group(3) == "127.0.0.1", port


@pytest.mark.parametrize("name", FILES)
def test_everything_else_stays_on_internal_networks(name):
    doc = yaml.safe_load((ROOT / "compose" / name).read_text())
    for net, spec in doc["networks"].items():
        assert bool(spec.get("internal")) is (net != "edge"), net
    for n, svc in doc["services"].items():
        if n == "proxy-tls":
            assert svc["network_mode"] == "none" and "networks" not in svc
            continue
        assert "internal" in svc["networks"] or n in ("proxy", "cache"), n
        assert ("edge" in svc["networks"]) is (n == "proxy"), n
        # the front network (trusted for X-Forwarded-For) holds the proxy, the edge cache and
        # the API only
        assert ("front" in svc["networks"]) is (n in ("proxy", "api", "cache")), n
    # the proxy reaches the API on `front` only, so the API sees it there
    assert "internal" not in doc["services"]["proxy"]["networks"]


@pytest.mark.parametrize("name", FILES)
def test_the_api_runs_beyond_loopback_only_with_tokens(name):
    doc = yaml.safe_load((ROOT / "compose" / name).read_text())
    env = {
        k: v
        for k, v in interpolate(doc["services"]["api"]["environment"]).items()
        if k.startswith("PRECAST_")
    }
    api = {k.removeprefix("PRECAST_API__").lower(): v for k, v in env.items() if "_API__" in k}
    assert api["host"] == "0.0.0.0" and api["tokens_file"].startswith("/run/precast/tokens/")
    assert "auth_token" not in api  # a plain token in the environment: the file holds digests
    mounts = " ".join(doc["services"]["api"]["volumes"])
    assert ":/run/precast/tokens:ro" in mounts  # the folder: api-token replaces the file
    ApiSettings(api=api)
    with pytest.raises(ValueError, match="without a token"):
        ApiSettings(api={k: v for k, v in api.items() if k != "tokens_file"})


def test_grafana_has_a_login_and_sits_behind_the_proxy():
    env = COMPOSE["services"]["grafana"]["environment"]
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert env["GF_SECURITY_ADMIN_PASSWORD"].startswith("${GRAFANA_ADMIN_PASSWORD:?")
    assert "proxy_pass http://grafana:3000;" in NGINX


def test_the_edge_cache_sits_between_the_proxy_and_the_api():
    """compose's edge: the shipped VCL with compose's backends.vcl, on the front network only,
    no published port; the API purges it, answers its Host, and trusts its X-Forwarded-For."""
    import subprocess

    cache = COMPOSE["services"]["cache"]
    assert cache["build"]["dockerfile"] == "compose/Dockerfile.edge"
    assert "ports" not in cache and cache["networks"] == ["front"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in cache["volumes"]}
    assert mounts["/etc/varnish/precast/precast.vcl"] == "../deploy/edge/precast.vcl"
    assert mounts["/etc/varnish/precast/backends.vcl"] == "../deploy/edge/compose-backends.vcl"
    docker = (ROOT / "compose" / "Dockerfile.edge").read_text()
    assert "varnish-modules" in docker and "vcl_path=/etc/varnish/precast" in docker
    env = interpolate(COMPOSE["services"]["api"]["environment"])
    s = ApiSettings(
        api={"allowed_hosts": env["PRECAST_API__ALLOWED_HOSTS"]},
        edge={
            "purge_urls": env["PRECAST_EDGE__PURGE_URLS"],
            "lease_ttl_s": env["PRECAST_EDGE__LEASE_TTL_S"],
        },
    )
    assert s.edge.purge_urls == ["http://cache:6081"] and s.edge.lease_ttl_s > 0
    assert "cache" in s.api.allowed_hosts
    # the purgers ACL is the front network, where the replicas are
    backends = (ROOT / "deploy" / "edge" / "compose-backends.vcl").read_text()
    subnet = COMPOSE["networks"]["front"]["ipam"]["config"][0]["subnet"]
    net, bits = interpolate(subnet).split("/")
    assert f'"{net}"/{bits};' in backends
    # both VCL files compile (the service name resolves only under compose: loopback here)
    tmp = Path(__import__("tempfile").mkdtemp())
    (tmp / "backends.vcl").write_text(backends.replace('"api"', '"127.0.0.1"'))
    out = subprocess.run(
        [
            "varnishd",
            "-C",
            "-j",
            "none",  # the compiler reads the files as this user (a temporary folder is 0700)
            "-n",
            str(tmp / "n"),
            "-p",
            f"vcl_path={tmp}:{ROOT / 'deploy' / 'edge'}",
            "-f",
            str(ROOT / "deploy" / "edge" / "precast.vcl"),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]
