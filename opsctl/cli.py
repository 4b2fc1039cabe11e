"""`precast`: the local stack, topic contracts and the end-to-end demo.

precast stack up | down [kafka|redis] | status | running | install
precast topics ensure | list
precast demo
precast schemas export DIR
precast fleet check FILE | schema | show           (fleet specs, docs/fleets.md)
precast train --version V --simulate ROWS | --data FILE
precast observe generate | check   (alert rules and dashboards as code, docs/observability.md)
precast replay | backfill | shadow | deadletters | purge | lag | rebuild   (SRE tools, docs/sre.md)
precast dataset build | show, precast promote   (learn from outcomes, docs/sre.md)
precast audit checkpoint | prove | verify                       (audit log, docs/audit.md)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from opsctl.settings import StackCliSettings
from precast.errors import ConfigError
from precast.runtime import OneLineParser, run_cli, setup_logging
from precast.settings import load


def _stack(args: argparse.Namespace, settings: StackCliSettings) -> int:
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
        _up(stack, settings)
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


def _up(stack: Any, settings: StackCliSettings) -> None:
    from opsctl.stack.secure import SecureStack

    if isinstance(stack, SecureStack):
        stack.up(progress=lambda m: print(m, flush=True), topics=settings.topics)
        folder = stack.security.env_dir
        print(f"run a component as its user: set -a; . {folder}/worker.env; set +a", flush=True)
        return
    stack.up(progress=lambda m: print(m, flush=True), prometheus=settings.stack.prometheus)
    if stack.settings.brokers > 1 or stack.settings.redis_cluster:
        # The apps read these; one line to paste into the shell that runs them.
        env = " ".join(f"{k}={v}" for k, v in stack.client_env().items())
        print(f"point the apps at it: export {env}", flush=True)


def _topics(args: argparse.Namespace, settings: StackCliSettings) -> int:
    from precast.kafka import Admin
    from schemas.topics import catalog

    t = settings.topics
    topics = catalog(t.prefix, t.partitions, t.replication_factor)
    admin = Admin(settings.kafka)
    admin.wait_reachable()
    if args.action == "list":
        parts = admin.topic_partitions()
        for spec in topics:
            have = parts.get(spec.name)
            state = "missing" if have is None else f"{have} partitions"
            print(f"{spec.name:<32} {spec.cleanup_policy:<8} {state:<14} {spec.description}")
        return 0
    reports = admin.ensure_topics(list(topics))
    for r in reports:
        print(f"{r.name:<32} {r.action}{(': ' + r.detail) if r.detail else ''}")
    created = sum(r.action == "created" for r in reports)
    print(
        f"{created} created, {len({r.name for r in reports}) - created} already matched the contract"
    )
    return 0


def _demo(args: argparse.Namespace, settings: StackCliSettings) -> int:
    from opsctl.demo import run_demo

    return run_demo(
        settings,
        devices=args.devices,
        rate=args.rate,
        api_port=args.port,
        duration=args.duration,
        use_stack=not args.no_stack,
    )


def _schemas(args: argparse.Namespace, settings: StackCliSettings) -> int:
    import orjson

    from precast.errors import ConfigError
    from schemas.export import json_schemas
    from schemas.spec import load_spec

    out = Path(args.dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, schema in json_schemas(load_spec(settings.fleet.spec)).items():
            (out / name).write_bytes(
                orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
            )
            print(out / name)
    except OSError as exc:
        raise ConfigError(f"cannot write schemas to {out}: {exc.strerror}") from None
    return 0


def _observe(args: argparse.Namespace, settings: StackCliSettings) -> int:
    from opsctl.observe.render import DEPLOY, stale, write

    if args.action == "check":
        old = stale()
        for path in old:
            print(f"out of date: {path.relative_to(DEPLOY.parent)}")
        if old:
            print("run: precast observe generate", file=sys.stderr)
        return 1 if old else 0
    written = write()
    for path in written:
        print(f"wrote {path.relative_to(DEPLOY.parent)}")
    print(f"{len(written)} files changed" if written else "everything up to date")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="precast", description="precast operations CLI")
    sub = p.add_subparsers(dest="command", required=True)
    st = sub.add_parser(
        "stack", help="local Kafka 4 + Redis (+ Prometheus) for demos, tests and CI"
    )
    st.add_argument("action", choices=["up", "down", "status", "running", "install"])
    st.add_argument(
        "components",
        nargs="*",
        help="with down: stop only these (kafka, redis, prometheus, redis-exporter; default: all)",
    )
    st.add_argument(
        "--brokers",
        type=int,
        choices=[1, 3],
        help="Kafka nodes: 1 (default) or 3 with replicated topics (PRECAST_STACK__BROKERS)",
    )
    st.add_argument(
        "--redis-cluster",
        action="store_true",
        help="a Redis Cluster of 3 masters + 3 replicas instead of one Redis "
        "(PRECAST_STACK__REDIS_CLUSTER)",
    )
    st.add_argument(
        "--secure",
        action="store_true",
        help="the secured Kafka: TLS + SASL/SCRAM + ACLs, no plaintext listener, under "
        "<home>/secure on PRECAST_STACK__SECURE_KAFKA_PORT (docs/security.md)",
    )
    st.set_defaults(fn=_stack)
    tp = sub.add_parser("topics", help="topic contracts")
    tp.add_argument("action", choices=["ensure", "list"])
    tp.set_defaults(fn=_topics)
    dm = sub.add_parser(
        "demo", help="stack + topics + simulator + worker + API, live figures; Ctrl-C stops"
    )
    dm.add_argument("--devices", type=int, default=2_000)
    dm.add_argument(
        "--rate", type=float, default=2_000.0, help="heartbeats per second, all devices"
    )
    dm.add_argument("--port", type=int, default=8000, help="read API port")
    dm.add_argument("--duration", type=float, default=0.0, help="seconds; 0 runs until Ctrl-C")
    dm.add_argument(
        "--no-stack",
        action="store_true",
        help="use the configured Kafka and Redis (PRECAST_KAFKA__*, PRECAST_REDIS__URL) "
        "instead of starting the local stack",
    )
    dm.set_defaults(fn=_demo)
    ob = sub.add_parser(
        "observe", help="SLO rules and Grafana dashboards: write them under deploy/, or check"
    )
    ob.add_argument("action", choices=["generate", "check"])
    ob.set_defaults(fn=_observe)
    sc = sub.add_parser("schemas", help="event contracts as JSON Schema (docs/events.md)")
    sc.add_argument("action", choices=["export"])
    sc.add_argument("dir", help="folder to write <role>.v<version>.schema.json files into")
    sc.set_defaults(fn=_schemas)
    from opsctl.commands import register as register_ops

    register_ops(sub)  # replay, backfill, deadletters, purge, lag, rebuild, audit
    return p


def main(argv: list[str] | None = None) -> int:
    from opsctl.train import pass_through

    handed = pass_through(sys.argv[1:] if argv is None else argv)
    if handed is not None:
        return handed
    args = build_parser().parse_args(argv)

    def body() -> int:
        settings = load(StackCliSettings)
        setup_logging(settings.log_level)
        return args.fn(args, settings)

    return run_cli("precast", body)


if __name__ == "__main__":
    sys.exit(main())
