"""Helpers for the pipeline on the secured broker: each component a real process running as its
own Kafka principal (the env files `precast stack up --secure` writes), its output kept so the
tests can look for secrets in it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from opsctl.stack.secure import SecureStack
from precast.settings import TopicSettings
from tests.integration.ops_support import ROOT

# Where each component's own group / app id starts (schemas.access grants these prefixes).
GROUP_SETTING = {
    "worker": ("PRECAST_WORKER__GROUP_ID", "precast-workers"),
    "context": ("PRECAST_CONTEXT__APP_ID", "precast-context"),
    "api": ("PRECAST_API__GROUP_ID", "precast-api"),
    "auditor": ("PRECAST_AUDIT__GROUP_ID", "precast-auditor"),
    "drift": ("PRECAST_DRIFT__GROUP_ID", "precast-drift"),
}


def _clean_env() -> dict[str, str]:
    keep = ("PRECAST_STACK__", "PRECAST_DEV_")
    return {
        k: v for k, v in os.environ.items() if not k.startswith("PRECAST_") or k.startswith(keep)
    }


@dataclass
class SecureDeployment:
    """One topic prefix on the secured broker, its ACLs granted, and the processes run on it."""

    stack: SecureStack
    prefix: str
    partitions: int
    state: Path
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    procs: list[tuple[str, subprocess.Popen, IO[str]]] = field(default_factory=list)
    outputs: list[Path] = field(default_factory=list)

    def env(self, user: str, **extra: str) -> dict[str, str]:
        env = {
            **_clean_env(),
            **self.stack.env_for(user),
            "PRECAST_TOPICS__PREFIX": self.prefix,
            "PRECAST_TOPICS__PARTITIONS": str(self.partitions),
            "PRECAST_OPS__STATE_DIR": str(self.state / "ops"),
            "PRECAST_MODEL__PROVIDER": "cpu",
            "PRECAST_LOG_LEVEL": "INFO",
            # Never the shared Redis by accident: a test that wants one passes its own prefix.
            "PRECAST_REDIS__URL": "",
        }
        if user in GROUP_SETTING:
            name, stem = GROUP_SETTING[user]
            env[name] = f"{stem}-{self.token}"
        return {**env, **extra}

    def spawn(self, user: str, module: str, *args: str, **extra: str) -> subprocess.Popen:
        out = self.state / f"{user}-{len(self.procs)}.log"
        self.outputs.append(out)
        log = out.open("w")
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            env=self.env(user, **extra),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.procs.append((user, proc, log))
        return proc

    def run(
        self, user: str, module: str, *args: str, timeout: float = 180, **extra: str
    ) -> subprocess.CompletedProcess:
        run = subprocess.run(
            [sys.executable, "-m", module, *args],
            env=self.env(user, **extra),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        log = self.state / f"run-{user}-{len(self.outputs)}.log"
        log.write_text(run.stdout + run.stderr)
        self.outputs.append(log)
        return run

    def precast(self, *args: str, user: str = "ops", **extra: str) -> subprocess.CompletedProcess:
        return self.run(user, "opsctl.cli", *args, **extra)

    def stop_all(self) -> None:
        for _user, proc, _out in self.procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 30
        for _user, proc, log in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            log.close()

    def secrets(self) -> list[str]:
        """Every password of the stack (from its credentials file) and the API token."""
        import json

        return list(json.loads(self.stack.security.credentials_path.read_text()).values())

    def grant(self) -> None:
        self.stack.provision(TopicSettings(prefix=self.prefix, partitions=self.partitions))


def exited_with_one_line(run: subprocess.CompletedProcess, code: int, *says: str) -> str:
    err = run.stderr.strip()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert run.returncode == code, (run.returncode, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    last = lines[-1]
    for s in says:
        assert s in last, (s, last)
    return last
