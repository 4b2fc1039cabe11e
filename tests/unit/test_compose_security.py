"""The HTTP edge and Kafka of both compose files, read as data (no Docker engine here; issue 36,
deliverable 5): TLS ends at nginx with the operator's or a trial certificate, port 80 only
redirects, the API trusts X-Forwarded-For from the proxy's own network only, the proxy publishes
only what an anonymous reader may see, Redis's password only where Redis is used, and Kafka with
SASL/SCRAM and the per-component ACLs of `precast stack up --secure`, each service as its own
principal with its own password only."""

from __future__ import annotations

import ipaddress
import re

import pytest
import yaml

from consumer_api.settings import ApiSettings
from opsctl.commands.acls import read_passwords
from precast.errors import ConfigError
from schemas.access import COMPONENTS
from tests.unit.compose_support import ROOT, STAND_IN, interpolate, load, settings_env

FILES = {
    "docker-compose.yml": "nginx.conf",
    "docker-compose.cluster.yml": "nginx-cluster.conf",
}
SCRIPT = (ROOT / "compose" / "kafka-sasl.sh").read_text()
RAW = {name: yaml.safe_load((ROOT / "compose" / name).read_text()) for name in FILES}
# the services that talk to Redis (the store itself, its exporter and cluster init included)
REDIS_USERS = {"api", "ops", "redis-exporter", "redis-cluster-init"}


def servers(conf: str) -> list[str]:
    """The `server { ... }` blocks of an nginx conf (no nested braces beyond location)."""
    out, depth, start = [], 0, None
    for m in re.finditer(r"server\s*\{|\{|\}", conf):
        if m.group(0) != "}":
            if depth == 0 and m.group(0).startswith("server"):
                start = m.start()
            depth += 1
        else:
            depth -= 1
            if depth == 0 and start is not None:
                out.append(conf[start : m.end()])
                start = None
    return out


def nginx(name: str) -> str:
    return (ROOT / "compose" / FILES[name]).read_text()


@pytest.mark.parametrize("name", FILES)
def test_tls_ends_at_the_proxy_and_port_80_only_redirects(name):
    doc = load(name)
    blocks = servers(nginx(name))
    plain = [b for b in blocks if re.search(r"listen 80;", b)]
    tls = [b for b in blocks if re.search(r"listen 443 ssl;", b)]
    assert len(plain) == len(tls) == 1 and len(blocks) == 2
    assert "proxy_pass" not in plain[0]
    redirect = re.search(r"return 301 https://\$host:(\d+)\$request_uri;", plain[0])
    assert redirect, plain[0]
    ports = doc["services"]["proxy"]["ports"]
    published = {p.rsplit(":", 2)[2]: p.rsplit(":", 2)[1] for p in ports}
    assert set(published) == {"443", "80"}
    assert published["443"] == redirect.group(1)  # the redirect lands on the published port
    assert "ssl_certificate /etc/nginx/tls/tls.crt;" in tls[0]
    assert "ssl_certificate_key /etc/nginx/tls/tls.key;" in tls[0]
    assert "ssl_protocols TLSv1.2 TLSv1.3;" in tls[0]


@pytest.mark.parametrize("name", FILES)
def test_the_certificate_is_the_operators_or_a_trial_one_from_the_same_place(name):
    raw = RAW[name]["services"]
    proxy_mount = next(v for v in raw["proxy"]["volumes"] if v.endswith(":/etc/nginx/tls:ro"))
    init_mount = next(v for v in raw["proxy-tls"]["volumes"] if v.endswith(":/data/tls"))
    source = "${PRECAST_TLS_DIR:-proxy-tls}"
    assert proxy_mount.startswith(source + ":") and init_mount.startswith(source + ":")
    assert "proxy-tls" in RAW[name]["volumes"]  # the default is a named volume, not a path
    cmd = raw["proxy-tls"]["command"]
    assert cmd[:3] == ["python", "-m", "opsctl.stack.tls"]
    assert cmd[cmd.index("--dir") + 1] == "/data/tls"
    assert raw["proxy"]["depends_on"]["proxy-tls"] == {
        "condition": "service_completed_successfully"
    }
    dockerfile = (ROOT / "compose" / "Dockerfile").read_text()
    assert "chown precast /data/audit /data/tls" in dockerfile  # the volume is writable


def test_a_trial_certificate_is_made_once_and_an_operators_is_kept(tmp_path):
    from opsctl.stack.tls import main

    assert main(["--dir", str(tmp_path), "--name", "precast.example"]) == 0
    crt, key = (tmp_path / "tls.crt").read_bytes(), (tmp_path / "tls.key").read_bytes()
    assert oct((tmp_path / "tls.key").stat().st_mode & 0o777) == "0o600"
    assert main(["--dir", str(tmp_path)]) == 0
    assert (tmp_path / "tls.crt").read_bytes() == crt and (tmp_path / "tls.key").read_bytes() == key
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(crt)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "precast.example" in sans.get_values_for_type(x509.DNSName)


@pytest.mark.parametrize("name", FILES)
def test_the_api_trusts_forwarding_headers_from_the_proxy_network_only(name):
    doc = load(name)
    subnet = doc["networks"]["front"]["ipam"]["config"][0]["subnet"]
    net = ipaddress.ip_network(subnet)
    assert net.is_private and net.prefixlen >= 24  # room for the proxy and the replicas only
    env = settings_env(doc["services"]["api"])["api"]
    s = ApiSettings(api=env)
    assert [ipaddress.ip_network(p) for p in s.api.trusted_proxies] == [net]
    # Raw: the same variable and default in both places, so overriding one moves both.
    raw = RAW[name]
    assert (
        raw["networks"]["front"]["ipam"]["config"][0]["subnet"]
        in (raw["services"]["api"]["environment"]["PRECAST_API__TRUSTED_PROXIES"])
    )
    on_front = {n for n, svc in doc["services"].items() if "front" in svc.get("networks", [])}
    assert on_front - {"cache"} == {"proxy", "api"}  # and the edge cache, where there is one
    assert "localhost" in s.api.allowed_hosts and "*" not in s.api.allowed_hosts


@pytest.mark.parametrize("name", FILES)
def test_the_proxy_publishes_only_what_an_anonymous_reader_may_see(name):
    tls = next(b for b in servers(nginx(name)) if "listen 443" in b)
    assert re.search(r"location = /metrics \{\s*return 404;\s*\}", tls)
    upstreams = re.findall(r"proxy_pass (http://[^;]+);", tls)
    for target in upstreams:
        assert "auditor" not in target or target.endswith(
            ("/v1/checkpoint", "/v1/proof/consistency")
        ), target
        assert "inclusion" not in target and "/metrics" not in target
    if "auditor" in tls:
        assert re.search(r"location /audit/ \{\s*return 404;\s*\}", tls)
        # exact locations only: nothing else under /audit/ reaches the auditor
        for loc in re.findall(r"location (=?)\s*(/audit/\S*)", tls):
            assert loc[0] == "=" or loc[1] == "/audit/", loc


@pytest.mark.parametrize("name", FILES)
def test_the_redis_password_only_where_redis_is_used(name):
    for n, svc in RAW[name]["services"].items():
        text = yaml.safe_dump(svc)
        has = "REDIS_PASSWORD" in text
        is_redis = svc.get("image", "").startswith("redis:") or n in REDIS_USERS
        assert has is is_redis, n
    assert "PRECAST_REDIS__URL" not in yaml.safe_dump(RAW[name].get("x-precast-env", {}))


@pytest.mark.parametrize("name", FILES)
def test_every_service_is_its_own_kafka_principal_with_its_own_password_only(name):
    doc = load(name)
    raw = RAW[name]["services"]
    users: dict[str, str] = {}
    for n, svc in raw.items():
        env = svc.get("environment") or {}
        if not isinstance(env, dict) or "PRECAST_KAFKA__SASL_USERNAME" not in env:
            continue
        user = env["PRECAST_KAFKA__SASL_USERNAME"]
        users[n] = user
        assert env["PRECAST_KAFKA__SASL_PASSWORD"].startswith(f"${{KAFKA_{user.upper()}_PASSWORD:?")
        others = re.findall(r"KAFKA_([A-Z]+)_PASSWORD", yaml.safe_dump(svc))
        if n != "kafka-init":
            assert set(others) == {user.upper()}, (n, others)
        s = settings_env(doc["services"][n])["kafka"]
        assert s["security_protocol"] == "SASL_PLAINTEXT" and s["sasl_mechanism"] == "SCRAM-SHA-512"
    assert users.pop("kafka-init") == "admin"
    assert set(users.values()) <= set(COMPONENTS)
    # long-running services that run as the same component are replicas of one service
    assert len(set(users.values())) == len(users)
    for n, user in users.items():
        assert user == n, (n, user)


@pytest.mark.parametrize("name", FILES)
def test_kafka_init_creates_every_principal_in_use_from_stdin_and_grants_only_those(name):
    raw = RAW[name]["services"]
    script = raw["kafka-init"]["command"][2]
    assert raw["kafka-init"]["command"][:2] == ["sh", "-c"]
    # the passwords go through printf (a shell builtin) into stdin, never into an argv
    printf, rest = script.split("| precast acls users", 1)
    assert printf.startswith("printf ")
    assert "$$" not in rest and "$" not in rest  # no variable expands into any argument
    fmt = re.search(r"printf '([^']*)'", printf).group(1)
    created = [ln.split("=")[0] for ln in fmt.split("\\n") if ln]
    in_use = {
        svc["environment"]["PRECAST_KAFKA__SASL_USERNAME"]
        for n, svc in raw.items()
        if n != "kafka-init" and "PRECAST_KAFKA__SASL_USERNAME" in (svc.get("environment") or {})
    }
    assert set(created) == in_use
    # what the stdin lines expand to is what `precast acls users` reads
    lines = [ln.replace("%s", STAND_IN) for ln in fmt.split("\\n") if ln]
    assert set(read_passwords(lines)) == in_use
    assert "precast acls apply" in rest and "precast topics ensure" in rest
    granted = re.findall(r"--component (\w+)", rest)
    assert not granted or set(granted) == in_use


def test_read_passwords_is_one_line_and_never_echoes_a_password():
    with pytest.raises(ConfigError) as exc:
        read_passwords(["worker=s3cret-value-not-shown", "nobody=another-secret-value"])
    assert "another-secret-value" not in str(exc.value) and "line 2" in str(exc.value)
    with pytest.raises(ConfigError, match="short"):
        read_passwords(["worker=short"])
    with pytest.raises(ConfigError, match="no COMPONENT"):
        read_passwords(["# nothing", ""])


@pytest.mark.parametrize("name", FILES)
def test_compose_kafka_runs_with_sasl_acls_and_no_password_argument(name):
    raw = RAW[name]["services"]
    brokers = [n for n, s in raw.items() if s.get("image", "").startswith("apache/kafka")]
    assert brokers
    for n in brokers:
        svc = interpolate(raw[n])
        assert svc["entrypoint"] == ["/bin/sh", "/opt/precast/kafka-sasl.sh"]
        assert "./kafka-sasl.sh:/opt/precast/kafka-sasl.sh:ro" in svc["volumes"]
        assert (
            "--command-config /tmp/precast-kafka/admin.properties" in svc["healthcheck"]["test"][1]
        )
    for line in (
        "listeners=SASL_PLAINTEXT://:$PORT,CONTROLLER://:$CONTROLLER_PORT",
        "listener.security.protocol.map=SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found=false",
        "super.users=User:broker;User:admin",
    ):
        assert line in SCRIPT.splitlines(), line
    assert "ANONYMOUS" not in SCRIPT and "PLAINTEXT://" not in SCRIPT.replace("SASL_PLAINTEXT", "")
    # the super users' passwords reach the storage tool through an argument file
    fmt = next(ln for ln in SCRIPT.splitlines() if "kafka-storage.sh" in ln)
    assert '"@$args"' in fmt and "PASSWORD" not in fmt
    assert "umask 077" in SCRIPT and 'rm -f "$args"' in SCRIPT
    start = next(ln for ln in SCRIPT.splitlines() if "kafka-server-start.sh" in ln)
    assert "PASSWORD" not in start
