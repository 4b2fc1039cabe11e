"""A single-node Apache Kafka 4 broker in KRaft mode, from Maven Central jars, on loopback."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import time
import uuid
from importlib import resources
from pathlib import Path
from typing import Protocol

from opsctl.settings import StackSettings
from opsctl.stack.process import ManagedProcess, port_in_use, tail
from precast.errors import PrecastError, StackError, Unreachable
from precast.files import write_private
from precast.settings import KafkaSettings

_LOG4J2 = """\
Configuration:
  Appenders:
    RollingFile:
      name: file
      fileName: "{logs}/server.log"
      filePattern: "{logs}/server.log.%i"
      PatternLayout: {{ pattern: "[%d] %p %m (%c)%n" }}
      SizeBasedTriggeringPolicy: {{ size: 20MB }}
      DefaultRolloverStrategy: {{ max: 3 }}
  Loggers:
    Root:
      level: INFO
      AppenderRef: [{{ ref: file }}]
    Logger:
      - {{ name: kafka.request.logger, level: WARN }}
      - {{ name: org.apache.kafka.controller, level: WARN }}
"""


def java_major() -> int:
    java = shutil.which("java")
    if java is None:
        raise StackError(
            "java not found on PATH: Kafka 4 needs Java 17+ (apt-get install openjdk-17-jre-headless)"
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    m = re.search(r'version "(\d+)', out)
    return int(m.group(1)) if m else 0


def broker_port(settings: StackSettings, index: int) -> int:
    return settings.kafka_port + 2 * index


def controller_port(settings: StackSettings, index: int) -> int:
    return settings.controller_port + 2 * index


def new_cluster_id() -> str:
    """A Kafka cluster ID: 16 random bytes in URL-safe base64 without padding. Like Kafka's own
    Uuid.randomUuid, never one starting with "-": StorageTool's argument parser would take
    `-t -abc...` for an option (1 start in 64 failed that way)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


class BrokerSecurity(Protocol):
    """What makes a node the secured broker (opsctl.stack.secure): its folder, listeners and
    TLS/SASL/ACL properties, the SCRAM users formatted into its storage, and the credentials
    its own health checks connect with."""

    folder: Path

    def properties(self, port: int, controller: int) -> dict[str, str]: ...
    def format_args(self) -> list[str]: ...
    def admin_settings(self, bootstrap: str) -> KafkaSettings: ...


class KafkaNode:
    """One combined broker/controller. `index` numbers the nodes of a 3-node stack (node.id is
    index + 1); a single-node stack keeps its original folder and ports. With `security`, the
    secured broker of `precast stack up --secure`: its own folder and ports, no plaintext
    listener."""

    def __init__(
        self, settings: StackSettings, index: int = 0, security: BrokerSecurity | None = None
    ) -> None:
        self.s = settings
        self.index = index
        self.node_id = index + 1
        self.clustered = settings.brokers > 1 and security is None
        self.security = security
        suffix = f"-{self.node_id}" if self.clustered else ""
        self.dir = security.folder / "kafka" if security else settings.home / f"kafka{suffix}"
        self.data = self.dir / "data"
        self.logs = self.dir / "logs"
        self.libs = settings.jar_cache / settings.kafka_version / "libs"
        # Every node of a cluster formats its storage with the same cluster ID.
        self.cluster_id_file = (
            settings.home / "kafka-cluster.id" if self.clustered else self.dir / "cluster.id"
        )
        self.port = settings.secure_kafka_port if security else broker_port(settings, index)
        self.controller = (
            settings.secure_controller_port if security else controller_port(settings, index)
        )
        name = f"Kafka broker {self.node_id}" if self.clustered else "Kafka broker"
        if security:
            name = "Kafka (secured)"
        self.proc = ManagedProcess(name, self.dir / "kafka.pid", f"{self.dir}/server.properties")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- jars ---------------------------------------------------------------------------------
    def resolve_jars(self, progress=print) -> Path:
        """Copy kafka_2.13 and its runtime dependencies into the shared jar cache (once)."""
        done = self.libs.parent / ".complete"
        if done.exists():
            return self.libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise StackError(
                "mvn not found on PATH: needed once to fetch the Kafka jars (apt-get install maven)"
            )
        progress(
            f"resolving org.apache.kafka:kafka_2.13:{self.s.kafka_version} from Maven Central ..."
        )
        pom = resources.files("opsctl.stack").joinpath("kafka-pom.xml")
        tmp = self.libs.parent / "libs.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        with resources.as_file(pom) as pom_path:
            run = subprocess.run(
                [
                    mvn,
                    "-q",
                    "-B",
                    "-f",
                    str(pom_path),
                    "dependency:copy-dependencies",
                    f"-Dkafka.version={self.s.kafka_version}",
                    f"-DoutputDirectory={tmp}",
                    "-DincludeScope=runtime",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
        if run.returncode != 0 or not any(tmp.glob("kafka_2.13-*.jar")):
            last = (run.stdout + run.stderr).strip().splitlines()[-3:]
            raise StackError(
                f"mvn could not resolve Kafka {self.s.kafka_version}: {' | '.join(last)}"
            )
        shutil.rmtree(self.libs, ignore_errors=True)
        tmp.rename(self.libs)
        done.write_text(self.s.kafka_version + "\n")
        return self.libs

    # -- configuration ------------------------------------------------------------------------
    def write_config(self) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        replicas = str(self.s.brokers)
        min_isr = str(min(2, self.s.brokers))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            **self._quorum(),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data),
            # Topics come from contracts (`precast topics ensure`), never from a typo.
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
            # A cluster survives one lost node: internal topics on every node, acks from two.
            "default.replication.factor": replicas,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": replicas,
            # Fewer internal partitions: a small dev stack starts and answers faster.
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.num.partitions": "4",
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
            # Groups form at once instead of waiting 3 s for more members.
            "group.initial.rebalance.delay.ms": "0",
            # The cleaner's default 128 MB dedupe buffer would take a big slice of a small heap.
            "log.cleaner.dedupe.buffer.size": str(32 * 1024 * 1024),
            "num.network.threads": "2",
            "num.io.threads": "4",
        }
        if self.clustered:
            # A dead or frozen node is fenced 3 s after its last heartbeat instead of 9 s: its
            # partitions get new leaders and leave every ISR then (with acks=all every write
            # waits for that), so leadership moves well inside the 10 s recovery target.
            # Heartbeats every 500 ms: six can be missed (GC, a busy machine) before a live
            # node is fenced (docs/cluster.md, "Failover time").
            props["broker.session.timeout.ms"] = "3000"
            props["broker.heartbeat.interval.ms"] = "500"
            # A killed active controller: the voters start an election after 1 s without a
            # fetch from it instead of 2 s, and the new controller fences the dead node 3 s
            # after that (issue 36: leaders moved 5.5-6.4 s after such a kill, answers 10.1 s).
            props["controller.quorum.fetch.timeout.ms"] = "1000"
        if self.security is not None:
            props.update(self.security.properties(self.port, self.controller))
        path = self.dir / "server.properties"
        # 0600: the secured broker's file holds its own SCRAM password (jaas.config).
        write_private(path, "".join(f"{k}={v}\n" for k, v in props.items()))
        (self.dir / "log4j2.yaml").write_text(_LOG4J2.format(logs=self.logs))
        return path

    def _quorum(self) -> dict[str, str]:
        if not self.clustered:
            # One self-formatted voter (`format --standalone`): the dynamic quorum of KIP-853.
            return {"controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller}"}
        # A fixed set of three voters: every node is formatted alike, none bootstraps the others.
        voters = ",".join(
            f"{i + 1}@127.0.0.1:{controller_port(self.s, i)}" for i in range(self.s.brokers)
        )
        return {"controller.quorum.voters": voters}

    def _java(self, *args: str, heap: str = "128m") -> list[str]:
        return ["java", f"-Xmx{heap}", "-cp", f"{self.libs}/*", *args]

    def _format(self, config: Path) -> None:
        if (self.data / "meta.properties").exists():
            return
        cluster_file = self.cluster_id_file
        if not cluster_file.exists() or cluster_file.read_text().startswith("-"):
            cluster_file.write_text(new_cluster_id() + "\n")
        standalone = [] if self.clustered else ["--standalone"]
        if self.security is not None:  # SCRAM users the broker needs before it can start
            standalone += self.security.format_args()
        run = subprocess.run(
            self._java(
                "-Dlog4j2.configurationFile=" + str(self.dir / "log4j2.yaml"),
                "kafka.tools.StorageTool",
                "format",
                *standalone,
                "--ignore-formatted",
                "-t",
                cluster_file.read_text().strip(),
                "-c",
                str(config),
            ),
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode != 0:
            raise StackError(
                f"Kafka storage format failed: {(run.stdout + run.stderr).strip()[-300:]}"
            )

    # -- lifecycle --------------------------------------------------------------------------------
    def running(self) -> bool:
        return self.proc.pid() is not None

    def start(self) -> None:
        if self.running():
            return
        if java_major() < 17:
            raise StackError("Java 17 or newer is needed for Kafka 4 (java -version reports older)")
        for port in (self.port, self.controller):
            if port_in_use(port):
                raise StackError(
                    f"port {port} is in use by another process; stop it or choose other "
                    "ports (PRECAST_STACK__KAFKA_PORT / PRECAST_STACK__CONTROLLER_PORT)"
                )
        self.resolve_jars()
        config = self.write_config()
        self._format(config)
        heap = self.s.cluster_kafka_heap if self.clustered else self.s.kafka_heap
        # A clustered node commits and touches its whole heap at start (-Xms = -Xmx with
        # AlwaysPreTouch, as Kafka's own docs advise for production): a heap that grows from a
        # small -Xms shows up as RSS creeping for minutes (the soak), and memory a broker
        # will use is better claimed, and seen, before the load than during it. The single
        # node keeps a small initial heap: it is the demo's, on whatever laptop runs it.
        initial = [f"-Xms{heap}", "-XX:+AlwaysPreTouch"] if self.clustered else ["-Xms256m"]
        argv = self._java(
            *initial,
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.dir / 'log4j2.yaml'}",
            f"-Dkafka.logs.dir={self.logs}",
            "kafka.Kafka",
            str(config),
            heap=heap,
        )
        self.proc.start(argv, self.logs / "stdout.log", self.dir)

    def client_settings(self) -> KafkaSettings:
        """What the stack's own checks connect with (the admin user on the secured broker)."""
        if self.security is not None:
            return self.security.admin_settings(self.bootstrap)
        return KafkaSettings(bootstrap_servers=self.bootstrap)

    def wait_ready(self, timeout: float) -> None:
        from precast.kafka import Admin

        admin = Admin(self.client_settings())
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.exited_early():
                raise StackError(f"{self.proc.name} exited during start: {self.last_log()}")
            try:
                admin.wait_reachable(timeout=2.0)
                return
            except (Unreachable, PrecastError) as exc:  # also a refusal while SCRAM loads
                if time.monotonic() > deadline:
                    raise StackError(
                        f"{self.proc.name} not ready after {timeout:g}s: {exc}; {self.last_log()}"
                    ) from None

    def healthy(self, timeout: float = 3.0) -> bool:
        from precast.kafka import Admin

        try:
            Admin(self.client_settings()).wait_reachable(timeout=timeout)
            return True
        except (Unreachable, PrecastError):
            return False

    def stop(self, hard: bool = False) -> bool:
        return self.proc.stop(timeout=30.0, hard=hard)

    def last_log(self) -> str:
        errors = (
            [
                line
                for line in (self.logs / "server.log").read_text(errors="replace").splitlines()
                if " ERROR " in line
            ][-2:]
            if (self.logs / "server.log").exists()
            else []
        )
        return " | ".join(errors) or tail(self.logs / "stdout.log", 3) or "no log output"
