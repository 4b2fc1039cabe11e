"""The whole pipeline on the secured broker (`precast stack up --secure`: TLS with the stack's CA,
SASL/SCRAM, ACLs, no plaintext listener), every component a real process as its own principal
with only the ACLs schemas/access.py grants it: simulator, worker, context aggregator (faust),
API (materializer, board feed, lineage reads), auditor, drift monitor, and the operator tools.
A wrong password or a missing ACL is one line naming the component and what was refused, and
no password or token shows in any output, metric or error."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from opsctl.stack.process import free_port
from precast.kafka import Admin
from precast.settings import TopicSettings
from precast.tokens import line_for, new_token
from schemas.topics import catalog
from tests.integration.api_helpers import wait_for
from tests.integration.secure_support import SecureDeployment, exited_with_one_line

PARTITIONS = 3
DEVICES = 30


def http(url: str, token: str | None = None, body: bytes | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


@pytest.fixture
def deployment(secure_stack, unique, tmp_path):
    prefix = unique("sec") + "."
    d = SecureDeployment(secure_stack, prefix, PARTITIONS, tmp_path)
    d.grant()
    yield d
    d.stop_all()
    admin = Admin(secure_stack.settings_for("admin"))
    names = [t.name for t in catalog(prefix, PARTITIONS)]
    existing = admin.topic_partitions()
    admin.delete_topics([n for n in existing if n in names or n.startswith(prefix)])


def test_the_broker_has_no_plaintext_listener(secure_stack):
    props = (secure_stack.kafka.dir / "server.properties").read_text()
    listeners = next(ln for ln in props.splitlines() if ln.startswith("listeners="))
    assert "PLAINTEXT" not in listeners.replace("SASL_SSL", "")
    protocols = next(ln for ln in props.splitlines() if ln.startswith("listener.security"))
    assert protocols.split("=", 1)[1] == "SASL_SSL:SASL_SSL,CONTROLLER:SSL"
    assert "allow.everyone.if.no.acl.found=false" in props
    assert oct((secure_stack.kafka.dir / "server.properties").stat().st_mode & 0o777) == "0o600"


def test_refusals_are_one_line_naming_the_component_and_what(deployment):
    d = deployment
    ensured = d.precast("topics", "ensure")
    assert ensured.returncode == 0, ensured.stderr
    quiet = {"PRECAST_LOG_LEVEL": "WARNING"}
    wrong = d.run(
        "worker", "workers.precompute.cli", PRECAST_KAFKA__SASL_PASSWORD="not-the-password", **quiet
    )
    line = exited_with_one_line(wrong, 6, "precast-worker:", "refused to authenticate", "'worker'")
    assert wrong.stderr.strip() == line  # nothing else: no librdkafka chatter, no traceback
    # the drift monitor's principal may read heartbeats only: as the context aggregator...
    context = d.run("drift", "workers.context.aggregator", **quiet)
    line = exited_with_one_line(context, 6, "precast-context:", "user 'drift'")
    assert "read topic " + d.prefix + "work-orders" in line
    assert "write to topic " + d.prefix + "device-context" in line
    # ...and as the API, refused before anything starts
    api = d.run("drift", "consumer_api.cli", "--port", str(free_port()), **quiet)
    line = exited_with_one_line(api, 6, "precast-api:", "write to topic " + d.prefix + "presence")
    # a plaintext client finds no listener to talk to
    plain = d.run(
        "ops", "opsctl.cli", "topics", "list", PRECAST_KAFKA__SECURITY_PROTOCOL="PLAINTEXT"
    )
    exited_with_one_line(plain, 3, "unreachable", "TLS or SASL")
    # every ACL this prefix needs is on the cluster (as the admin: only it may read ACLs)
    tools = d.precast("acls", "missing", user="admin")
    assert tools.returncode == 0 and "0 of 90 ACLs missing" in tools.stdout, tools.stdout
    for out in (wrong, context, api, plain):
        for secret in d.secrets():
            assert secret not in out.stdout + out.stderr


def test_the_pipeline_runs_end_to_end_on_the_secured_broker(deployment, redis_settings):
    d = deployment
    assert d.precast("topics", "ensure").returncode == 0
    cat = catalog(d.prefix, PARTITIONS)
    token = new_token()
    (d.state / "tokens").write_text(line_for("ops-ui", frozenset({"read", "board"}), token) + "\n")
    api_port, audit_port = free_port(), free_port()
    ports = {name: free_port() for name in ("worker", "context", "drift")}
    metrics = lambda name: {"PRECAST_METRICS__PORT": str(ports[name])}  # noqa: E731
    d.spawn("context", "workers.context.aggregator", **metrics("context"),
            PRECAST_CONTEXT__DATA_DIR=str(d.state / "context"))  # fmt: skip
    d.spawn("worker", "workers.precompute.cli", **metrics("worker"), PRECAST_REDIS__URL="")
    d.spawn("drift", "workers.drift.cli", **metrics("drift"), PRECAST_DRIFT__MIN_ROWS="20",
            PRECAST_DRIFT__STEP_S="1")  # fmt: skip
    d.spawn("api", "consumer_api.cli", "--port", str(api_port), PRECAST_REDIS__URL="",
            PRECAST_API__TOKENS_FILE=str(d.state / "tokens"),
            PRECAST_API__SERVER="uvicorn")  # fmt: skip
    d.spawn("auditor", "auditor.cli", "--port", str(audit_port),
            PRECAST_AUDIT__DB_PATH=str(d.state / "audit" / "log.db"),
            PRECAST_AUDIT__KEY_PATH=str(d.state / "audit" / "signing.key"),
            PRECAST_AUDIT__CHECKPOINT_INTERVAL_S="0.5")  # fmt: skip
    for name, port in ports.items():
        # (the drift monitor's /readyz hangs while it consumes, on any broker: its /healthz)
        probe = "healthz" if name == "drift" else "readyz"
        wait_for(lambda p=port, q=probe: http(f"http://127.0.0.1:{p}/{q}")[0] == 200, 120,
                 0.5, what=f"{name} ready")  # fmt: skip
    wait_for(lambda: http(f"http://127.0.0.1:{api_port}/readyz")[0] == 200, 120, 0.5, what="api")
    sim = d.run("simulator", "producers.cli", "--devices", str(DEVICES), "--rate", "300",
                "--count", "600", "--bad-rate", "0.02", "--seed", "7",
                PRECAST_SIMULATOR__SPEEDUP="200")  # fmt: skip
    assert sim.returncode == 0, sim.stderr[-2000:]
    ids = ",".join(f"dev-{i:06d}" for i in range(DEVICES))
    api = f"http://127.0.0.1:{api_port}"

    def answered() -> bool:
        status, body = http(f"{api}/v1/predictions?ids={ids}", token)
        return status == 200 and all(
            p["source"] != "fallback" for p in json.loads(body)["predictions"]
        )

    wait_for(answered, 90, 0.5, what="every device answered through the API")
    assert http(f"{api}/v1/predictions?ids={ids}")[0] == 401
    beacon = b'{"timings": [{"input_to_shown_ms": 5, "network_ms": 1}]}'
    assert http(f"{api}/v1/beacon", token, beacon)[0] == 403  # a read+board token: no beacons

    # The board feed read the context the aggregator published; lineage reads the events back.
    def with_context() -> str | None:
        for i in range(DEVICES):
            status, body = http(f"{api}/v1/board/devices/dev-{i:06d}", token)
            if status == 200 and json.loads(body).get("context"):
                return f"dev-{i:06d}"
        return None

    device = wait_for(with_context, 60, 0.5, what="context from faust on the board")
    status, body = http(f"{api}/v1/board/devices/{device}/events", token)
    events = json.loads(body)["events"]
    assert status == 200 and events and all("event" in e for e in events), body[:500]

    # The auditor logs and signs what the workers publish.
    def signed_size() -> int:  # the note's second line
        status, note = http(f"http://127.0.0.1:{audit_port}/v1/checkpoint")
        return int(note.split(b"\n")[1]) if status == 200 else 0

    wait_for(lambda: signed_size() > 0, 60, 0.5, what="a signed checkpoint")
    # The drift monitor tests windows of the live heartbeats.
    drift = http(f"http://127.0.0.1:{ports['drift']}/metrics")[1].decode()
    assert "precast_drift" in drift

    # The operator tools, as the ops principal.
    lag = d.precast("lag", "--group", f"precast-workers-{d.token}")
    assert lag.returncode == 0 and f"precast-workers-{d.token}" in lag.stdout, lag.stderr
    # the guard sees the assign-based readers (API, auditor) through their presence records
    from opsctl.toolkit.write_guard import present_readers

    # (the ops principal may use only its deployment's groups: the prefix a process's
    # CommonSettings would give it)
    ops = d.stack.settings_for("ops").model_copy(update={"group_prefix": d.prefix})
    readers = present_readers(Admin(ops), TopicSettings(prefix=d.prefix))
    assert {"api", "auditor"} <= {r.component for r in readers}
    assert all(cat.predictions.name in r.reads for r in readers)
    scratch = f"{d.prefix}scratch.hb"
    replay = d.precast("replay", cat.heartbeats.name, scratch, "--offsets", "*:0-",
                       "--create-target", "--no-progress")  # fmt: skip
    assert replay.returncode == 0, replay.stderr[-2000:]
    redrive = d.precast("deadletters", "redrive", "--yes", "--no-progress")
    assert redrive.returncode == 0 and "sent " in redrive.stdout, redrive.stdout + redrive.stderr
    dry = d.precast("purge", "1.0", "--no-progress")
    assert dry.returncode == 0 and "would purge" in dry.stdout, dry.stderr
    purged = d.precast("purge", "1.0", "--yes", "--no-progress")
    assert purged.returncode == 0 and "purge markers written" in purged.stdout, purged.stderr
    # (a key prefix of its own, not the session's: other tests check theirs stays empty)
    redis = {
        "PRECAST_REDIS__URL": redis_settings.url,
        "PRECAST_REDIS__KEY_PREFIX": f"test-secure-{d.token}:",
    }
    rebuilt = d.precast("rebuild", "--no-progress", **redis)
    from precast.serving import RedisStore
    from precast.settings import RedisSettings

    RedisStore.from_settings(
        RedisSettings(url=redis_settings.url, key_prefix=redis["PRECAST_REDIS__KEY_PREFIX"])
    ).clear()
    assert rebuilt.returncode == 0 and "purge markers" in rebuilt.stdout, rebuilt.stderr[-2000:]
    shadow = d.precast("shadow", "--candidate", "1.1.0", "--offsets", "*:0-", "--events",
                       "heartbeats", "--no-progress")  # fmt: skip
    assert shadow.returncode == 0 and "report:" in shadow.stdout, shadow.stderr[-2000:]
    shadow_out = catalog(d.prefix, PARTITIONS).shadow_predictions.name
    assert Admin(d.stack.settings_for("ops")).topic_partitions().get(shadow_out) == PARTITIONS

    served_metrics = drift + http(f"{api}/metrics")[1].decode()
    served_metrics += http(f"http://127.0.0.1:{audit_port}/metrics")[1].decode()
    d.stop_all()
    outputs = "".join(p.read_text(errors="replace") for p in d.outputs) + served_metrics
    broker_log = (d.stack.kafka.logs / "server.log").read_text(errors="replace")
    for secret in [*d.secrets(), token]:
        assert secret not in outputs and secret not in broker_log
    assert "Traceback" not in outputs, outputs[-3000:]


@pytest.mark.slow
def test_exactly_once_workers_and_backfills_on_the_secured_broker(deployment):
    """The rest of the sweep: a worker in exactly-once mode (its transactional id is an ACL of
    its own) and a backfill through another model as the ops principal."""
    from tests.integration.ops_support import read_all

    d = deployment
    assert d.precast("topics", "ensure").returncode == 0
    port = free_port()
    d.spawn("worker", "workers.precompute.cli", PRECAST_WORKER__EXACTLY_ONCE="true",
            PRECAST_WORKER__INSTANCE_ID=f"w-{d.token}", PRECAST_METRICS__PORT=str(port))  # fmt: skip
    wait_for(lambda: http(f"http://127.0.0.1:{port}/readyz")[0] == 200, 120, 0.5, what="worker")
    sim = d.run("simulator", "producers.cli", "--devices", str(DEVICES), "--rate", "300",
                "--count", "300", "--seed", "3")  # fmt: skip
    assert sim.returncode == 0, sim.stderr[-2000:]
    cat = catalog(d.prefix, PARTITIONS)
    # in the deployment's group namespace, as the ops processes are (schemas.access)
    ops = d.stack.settings_for("ops").model_copy(update={"group_prefix": d.prefix})
    count = lambda: sum(len(v) for v in read_all(ops, cat.predictions.name).values())  # noqa: E731
    wait_for(lambda: count() >= DEVICES, 90, 1.0, what="transactional predictions")
    backfill = d.precast("backfill", "--model", "workers/models/fleet-strategy/1.1.0",
                         "--offsets", "*:0-", "--events", "heartbeats", "--no-progress")  # fmt: skip
    assert backfill.returncode == 0 and "marked backfill" in backfill.stdout, backfill.stderr[
        -2000:
    ]
    d.stop_all()
    outputs = "".join(p.read_text(errors="replace") for p in d.outputs)
    assert not any(secret in outputs for secret in d.secrets())
