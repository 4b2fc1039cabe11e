"""compose's Kafka start script (compose/kafka-sasl.sh) run for real with the local stack's Kafka
jars, as compose runs it in the apache/kafka image (no Docker engine here), then kafka-init's
own commands: SASL/SCRAM with the super users formatted in, a SASL controller listener, the
StandardAuthorizer; `precast acls users` (passwords on stdin) and `precast acls apply` give each
component exactly its ACLs; a wrong password and a component outside its ACLs are refused; no
password is ever in the argv of any process the script starts (issue 36, deliverable 5)."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from opsctl.settings import StackSettings
from opsctl.stack.process import free_port_block
from precast.kafka import Admin
from precast.kafka.access import missing_access
from precast.kafka.errors import AccessRefused
from precast.settings import KafkaSettings
from schemas.access import COMPONENTS
from schemas.topics import catalog

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LIBS = StackSettings().jar_cache / StackSettings().kafka_version / "libs"


def fake_kafka_home(home: Path) -> Path:
    """bin/kafka-storage.sh and bin/kafka-server-start.sh as the image has them (both end in
    `java ... "$@"`), over the jars the local stack already has."""
    bin_dir = home / "bin"
    bin_dir.mkdir(parents=True)
    main = {"kafka-storage.sh": "kafka.tools.StorageTool", "kafka-server-start.sh": "kafka.Kafka"}
    for name, cls in main.items():
        (bin_dir / name).write_text(f'#!/bin/sh\nexec java -Xmx384m -cp "{LIBS}/*" {cls} "$@"\n')
        (bin_dir / name).chmod(0o755)
    return home


def cmdlines(root_pid: int) -> list[str]:
    """The argv of `root_pid` and every descendant, as `ps` shows them."""
    out, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        todo += [int(c) for c in children]
    return out


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    if not LIBS.is_dir():
        pytest.skip("the local stack's Kafka jars are not downloaded")
    tmp = tmp_path_factory.mktemp("compose-kafka")
    port = free_port_block(2)
    pw = {u: secrets.token_urlsafe(18) for u in ("broker", "admin", *COMPONENTS)}
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PRECAST_", "KAFKA_"))},
        "KAFKA_HOME": str(fake_kafka_home(tmp / "kafka")),
        "KAFKA_CONF_DIR": str(tmp / "conf"),
        "KAFKA_DATA_DIR": str(tmp / "data"),
        "KAFKA_PORT": str(port),
        "KAFKA_CONTROLLER_PORT": str(port + 1),
        "KAFKA_NODE_ID": "1",
        "KAFKA_ADVERTISED_HOST": "127.0.0.1",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": f"1@127.0.0.1:{port + 1}",
        "CLUSTER_ID": "precast-compose-00000w",
        "KAFKA_BROKER_PASSWORD": pw["broker"],
        "KAFKA_ADMIN_PASSWORD": pw["admin"],
        "KAFKA_PROPERTIES": "offsets.topic.replication.factor=1\n"
        "transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n",
    }
    log = (tmp / "kafka.log").open("w")
    proc = subprocess.Popen(
        ["/bin/sh", str(ROOT / "compose" / "kafka-sasl.sh")],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    def settings(user: str, password: str | None = None) -> KafkaSettings:
        return KafkaSettings(
            bootstrap_servers=f"127.0.0.1:{port}",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username=user,
            sasl_password=password or pw[user],  # type: ignore[arg-type]
            connect_timeout_s=60,
        )

    try:
        Admin(settings("admin")).wait_reachable()
        yield {"pw": pw, "settings": settings, "proc": proc, "tmp": tmp, "port": port}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()


def precast(broker, *args: str, stdin: str = "", user: str = "admin", prefix: str = "cmp."):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PRECAST_")},
        "PRECAST_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{broker['port']}",
        "PRECAST_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "PRECAST_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
        "PRECAST_KAFKA__SASL_USERNAME": user,
        "PRECAST_KAFKA__SASL_PASSWORD": broker["pw"][user],
        "PRECAST_TOPICS__PREFIX": prefix,
        "PRECAST_TOPICS__PARTITIONS": "1",
        "PRECAST_OPS__STATE_DIR": str(broker["tmp"] / "ops"),
    }
    return subprocess.run(
        [sys.executable, "-m", "opsctl.cli", *args],
        input=stdin,
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_no_password_in_any_argv_and_none_left_in_files_but_the_0600_ones(broker):
    argvs = cmdlines(broker["proc"].pid)
    assert any("kafka.Kafka" in a for a in argvs), argvs
    for a in argvs:
        for password in broker["pw"].values():
            assert password not in a
    conf = broker["tmp"] / "conf"
    assert not (conf / "format.args").exists()
    for f in conf.iterdir():
        assert oct(f.stat().st_mode & 0o777) == "0o600", f


def test_kafka_init_gives_each_component_its_acls_and_nothing_more(broker):
    pw = broker["pw"]
    lines = "".join(f"{c}={pw[c]}\n" for c in COMPONENTS)
    users = precast(broker, "acls", "users", stdin=lines)
    assert users.returncode == 0, users.stderr
    for password in pw.values():
        assert password not in users.stdout + users.stderr
    applied = precast(broker, "acls", "apply")
    assert applied.returncode == 0, applied.stderr
    ensured = precast(broker, "topics", "ensure")
    assert ensured.returncode == 0, ensured.stderr
    cat = catalog("cmp.", 1)
    for component, access in COMPONENTS.items():
        admin = Admin(broker["settings"](component))
        assert missing_access(admin, access, cat) == [], component
    # the simulator may write events and read nothing
    sim = Admin(broker["settings"]("simulator"))
    assert missing_access(sim, COMPONENTS["worker"], cat)
    # nor does another deployment's prefix hold anything for these principals
    assert missing_access(
        Admin(broker["settings"]("worker")), COMPONENTS["worker"], catalog("x.", 1)
    )


def test_a_wrong_password_and_an_unknown_user_are_refused(broker):
    for user, password in (("worker", "not-the-password-000"), ("nobody", "whatever-it-is-000")):
        s = broker["settings"]("admin").model_copy(
            update={"sasl_username": user, "sasl_password": password, "connect_timeout_s": 15}
        )
        with pytest.raises(AccessRefused):
            Admin(s).wait_reachable()
