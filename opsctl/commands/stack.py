"""`precast stack up | down | status | running | install`: the local Kafka 4 + Redis (+
Prometheus) for demos, tests and CI (opsctl/stack/), plaintext or `--secure`."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from opsctl.commands.base import Command
from opsctl.settings import StackCliSettings
from precast.errors import ConfigError


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["up", "down", "status", "running", "install"])
    parser.add_argument(
        "components",
        nargs="*",
        help="with down: stop only these (kafka, redis, prometheus, redis-exporter, jaeger; "
        "default: all)",
    )
    parser.add_argument(
        "--brokers",
        type=int,
        choices=[1, 3],
        help="Kafka nodes: 1 (default) or 3 with replicated topics (PRECAST_STACK__BROKERS)",
    )
    parser.add_argument(
        "--redis-cluster",
        action="store_true",
        help="a Redis Cluster of 3 masters + 3 replicas instead of one Redis "
        "(PRECAST_STACK__REDIS_CLUSTER)",
    )
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="also Jaeger, built from its Go module on first use; the apps then trace into it "
        "(PRECAST_STACK__TRACING; docs/observability.md)",
    )
    parser.add_argument(
        "--edge",
        action="store_true",
        help="also Varnish (with xkey) in front of the API replicas of PRECAST_STACK__EDGE_BACKENDS, "
        "and its exporter; the replicas then purge it (PRECAST_STACK__EDGE; docs/api.md)",
    )
    parser.add_argument(
        "--secure",
        action="store_true",
        help="the secured Kafka: TLS + SASL/SCRAM + ACLs, no plaintext listener, under "
        "<home>/secure on PRECAST_STACK__SECURE_KAFKA_PORT (docs/security.md)",
    )


def run(args: argparse.Namespace, settings: StackCliSettings) -> int:
    from opsctl.stack import COMPONENTS

    if args.components and args.action != "down":
        raise ConfigError(f"stack {args.action} takes no component names")
    unknown = sorted(set(args.components) - set(COMPONENTS))
    if unknown:
        raise ConfigError(
            f"unknown stack component {', '.join(unknown)} (choose from {', '.join(COMPONENTS)})"
        )
    stack = _which_stack(args, settings)
    if args.action == "up":
        _up(stack, settings, args)
        return 0
    if args.action == "install":
        stack.kafka.resolve_jars(progress=lambda m: print(m, flush=True))
        return 0
    if args.action == "down":
        stopped = stack.down(args.components or None)
        print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
        return 0
    if args.action == "running":
        # One short name per line, for scripts (./dev) that stop only what they started.
        for name in stack.running():
            print(name)
        return 0
    rows = stack.status()
    for r in rows:
        pid = f"pid {r.pid}" if r.pid else "-"
        print(f"{r.name:<16} {r.state:<10} {pid:<12} {r.address}")
    return 0 if all(r.state == "healthy" for r in rows) else 1


def _which_stack(args: argparse.Namespace, settings: StackCliSettings) -> Any:
    """The plaintext LocalStack, or the SecureStack of `--secure` (one Kafka node only)."""
    from opsctl.stack import LocalStack
    from opsctl.stack.secure import SecureStack

    if args.secure or settings.stack.secure:
        if args.brokers not in (None, 1) or args.redis_cluster:
            raise ConfigError("--secure runs one Kafka node (no --brokers 3, no --redis-cluster)")
        if args.components and args.components != ["kafka"]:
            raise ConfigError("--secure runs only Kafka: `stack down --secure` stops it")
        return SecureStack(settings.stack)
    update = {"brokers": args.brokers} if args.brokers else {}
    if args.redis_cluster:
        update["redis_cluster"] = True
    return LocalStack(settings.stack.model_copy(update=update))


def _up(stack: Any, settings: StackCliSettings, args: argparse.Namespace) -> None:
    from opsctl.stack.secure import SecureStack

    if isinstance(stack, SecureStack):
        stack.up(progress=lambda m: print(m, flush=True), topics=settings.topics)
        folder = stack.security.env_dir
        print(f"run a component as its user: set -a; . {folder}/worker.env; set +a", flush=True)
        return
    tracing = bool(getattr(args, "tracing", False)) or settings.stack.tracing
    edge = bool(getattr(args, "edge", False)) or settings.stack.edge
    stack.up(
        progress=lambda m: print(m, flush=True),
        prometheus=settings.stack.prometheus,
        tracing=tracing,
        edge=edge,
    )
    if stack.settings.brokers > 1 or stack.settings.redis_cluster or tracing or edge:
        # The apps read these; one line to paste into the shell that runs them.
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in stack.client_env().items())
        print(f"point the apps at it: export {env}", flush=True)


COMMAND = Command(
    "stack",
    help="local Kafka 4 + Redis (+ Prometheus) for demos, tests and CI",
    arguments=arguments,
    run=run,
)
