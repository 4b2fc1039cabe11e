"""The secured local Kafka (`precast stack up --secure`): TLS with a CA the stack makes, SASL/SCRAM
for every client, Kafka's StandardAuthorizer with one principal per component holding only the
ACLs `schemas.access` lists, and no plaintext listener. It lives under `<home>/secure/` on its
own ports (`PRECAST_STACK__SECURE_KAFKA_PORT`, default 9192), so it runs beside the plaintext
stack of the same home.

- Listeners: SASL_SSL (clients and the broker itself, SCRAM-SHA-512) and CONTROLLER (mutual TLS:
  KRaft controllers cannot use SCRAM, whose credentials live in the metadata they serve).
- Users: `broker` and `admin` (super users) are formatted into the storage (`kafka-storage
  format --add-scram`), so they exist before the first start; the component users are created
  or updated through the admin API at every `up` (`precast.kafka.access`). No password is ever
  an argument of a process (`ps` shows every argument to every local user): `--add-scram` reaches
  the storage tool through a Java argument file (`@file`, 0600, removed once the broker runs).
- Files (all 0600 but the CA): `tls/ca.pem`, `tls/broker.pem`, `credentials.json` (the
  passwords), `env/<component>.env` (the PRECAST_KAFKA__* lines a component runs with).
See docs/security.md.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from opsctl.settings import StackSettings
from opsctl.stack import ComponentStatus
from opsctl.stack import tls as tlsfiles
from opsctl.stack.kafka_node import KafkaNode
from precast.files import write_private
from precast.settings import KafkaSettings, TopicSettings
from schemas.access import COMPONENTS, grants, principal_for

MECHANISM = "SCRAM-SHA-512"
SUPER_USERS = ("broker", "admin")
USERS = (*SUPER_USERS, *COMPONENTS)


class SecuredBroker:
    """The `BrokerSecurity` of the secured node: its properties, users and credentials."""

    def __init__(self, settings: StackSettings) -> None:
        self.folder = settings.home / "secure"
        self.tls_dir = self.folder / "tls"
        self.env_dir = self.folder / "env"
        self.credentials_path = self.folder / "credentials.json"
        self.tls = tlsfiles.files_in(self.tls_dir)
        self._passwords: dict[str, str] = {}

    # -- files ------------------------------------------------------------------------------
    def prepare(self) -> None:
        """CA, broker certificate and a password per user (new ones only where missing)."""
        self.tls = tlsfiles.make(self.tls_dir)
        known: dict[str, str] = {}
        if self.credentials_path.exists():
            known = json.loads(self.credentials_path.read_text())
        missing = [u for u in USERS if u not in known]
        # URL-safe characters only: they pass unquoted through `--add-scram` and jaas.config.
        known.update({u: secrets.token_urlsafe(24) for u in missing})
        if missing or not self.credentials_path.exists():
            write_private(self.credentials_path, json.dumps(known, indent=2, sort_keys=True))
        self._passwords = known

    def password(self, user: str) -> str:
        if not self._passwords:
            self.prepare()
        return self._passwords[user]

    # -- BrokerSecurity ------------------------------------------------------------------------
    def properties(self, port: int, controller: int) -> dict[str, str]:
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="broker" password="{self.password("broker")}";'
        )
        return {
            "listeners": f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SSL",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": MECHANISM,
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.tls.broker),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.tls.ca),
            "listener.name.controller.ssl.client.auth": "required",
            # The controller listener's principal is the certificate's CN: "broker".
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": ";".join(f"User:{u}" for u in SUPER_USERS),
        }

    @property
    def format_args_path(self) -> Path:
        return self.folder / "format.args"

    def format_args(self) -> list[str]:
        """`--add-scram` for each super user, written to a 0600 Java argument file: the storage
        tool's argv holds only `@<file>` (the java launcher expands it), never a password."""
        lines = []
        for user in SUPER_USERS:
            lines += ["--add-scram", f"{MECHANISM}=[name={user},password={self.password(user)}]"]
        write_private(self.format_args_path, "".join(f"{ln}\n" for ln in lines))
        return [f"@{self.format_args_path}"]

    def forget_format_args(self) -> None:
        """The argument file is needed only by the one format; credentials.json keeps the rest."""
        self.format_args_path.unlink(missing_ok=True)

    def client_settings(self, user: str, bootstrap: str) -> KafkaSettings:
        return KafkaSettings(
            bootstrap_servers=bootstrap,
            security_protocol="SASL_SSL",
            sasl_mechanism=MECHANISM,
            sasl_username=user,
            sasl_password=self.password(user),  # type: ignore[arg-type]  # pydantic makes it a SecretStr
            ssl_ca_location=str(self.tls.ca),
            client_id=f"precast-{user}",
        )

    def admin_settings(self, bootstrap: str) -> KafkaSettings:
        return self.client_settings("admin", bootstrap)

    def env(self, user: str, bootstrap: str) -> dict[str, str]:
        """The PRECAST_KAFKA__* variables a process runs with as `user`."""
        return {
            "PRECAST_KAFKA__BOOTSTRAP_SERVERS": bootstrap,
            "PRECAST_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
            "PRECAST_KAFKA__SASL_MECHANISM": MECHANISM,
            "PRECAST_KAFKA__SASL_USERNAME": user,
            "PRECAST_KAFKA__SASL_PASSWORD": self.password(user),
            "PRECAST_KAFKA__SSL_CA_LOCATION": str(self.tls.ca),
            "PRECAST_KAFKA__CLIENT_ID": f"precast-{user}",
        }


class SecureStack:
    """The secured broker's lifecycle: up (start, then users and ACLs), down, status."""

    def __init__(self, settings: StackSettings) -> None:
        self.settings = settings.model_copy(
            update={
                "home": Path(settings.home).expanduser().resolve(),
                "jar_cache": Path(settings.jar_cache).expanduser().resolve(),
            }
        )
        self.security = SecuredBroker(self.settings)
        self.kafka = KafkaNode(self.settings, 0, security=self.security)

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka.bootstrap

    def settings_for(self, user: str) -> KafkaSettings:
        return self.security.client_settings(user, self.bootstrap_servers)

    def env_for(self, user: str) -> dict[str, str]:
        return self.security.env(user, self.bootstrap_servers)

    def up(
        self, progress: Callable[[str], None] = print, *, topics: TopicSettings
    ) -> list[ComponentStatus]:
        started = time.monotonic()
        self.security.prepare()
        self.kafka.resolve_jars(progress)
        if not (self.kafka.running() and self.kafka.healthy()):
            if not self.kafka.running():
                self.kafka.start()
            self.security.forget_format_args()
            self.kafka.wait_ready(self.settings.start_timeout_s)
        granted = self.provision(topics)
        progress(
            f"secured Kafka ready in {time.monotonic() - started:.1f}s: SASL_SSL "
            f"{self.bootstrap_servers} (SCRAM-SHA-512, TLS CA {self.security.tls.ca}), "
            f"{len(COMPONENTS)} component users, {granted} ACLs; credentials in "
            f"{self.security.env_dir}/<component>.env (home {self.settings.home})"
        )
        return self.status()

    def provision(self, topics: TopicSettings, overrides: dict[str, str] | None = None) -> int:
        """Users (new passwords only where missing) and every component's ACLs for this topic
        prefix; writes the env files. Idempotent: run it again for another prefix."""
        from precast.kafka import Admin
        from precast.kafka.access import apply_grants, upsert_scram_user

        admin = Admin(self.settings_for("admin"))
        admin.wait_reachable()
        cat = topics.catalog()
        wanted = []
        for name, access in COMPONENTS.items():
            upsert_scram_user(admin, name, self.security.password(name), mechanism=MECHANISM)
            wanted += grants(access, cat, principal_for(name, overrides))
        for user in USERS:
            lines = "".join(f"{k}={v}\n" for k, v in self.env_for(user).items())
            write_private(self.security.env_dir / f"{user}.env", lines)
        return apply_grants(admin, wanted)

    def running(self) -> list[str]:
        return ["kafka"] if self.kafka.running() else []

    def down(self, only: object = None) -> list[str]:
        """Stops the broker (its only component; `only` for LocalStack's signature)."""
        return [self.kafka.proc.name] if self.kafka.stop() else []

    def status(self) -> list[ComponentStatus]:
        pid = self.kafka.proc.pid()
        state = "stopped" if pid is None else ("healthy" if self.kafka.healthy() else "unhealthy")
        return [
            ComponentStatus(self.kafka.proc.name, state, pid, f"SASL_SSL://{self.kafka.bootstrap}")
        ]
