"""`precast topics ensure | list`: the topic contracts (schemas.topics) on the cluster."""

from __future__ import annotations

import argparse

from opsctl.commands.base import Command
from opsctl.settings import StackCliSettings


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["ensure", "list"])


def run(args: argparse.Namespace, settings: StackCliSettings) -> int:
    from precast.kafka import Admin

    topics = settings.topics.catalog()
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


COMMAND = Command("topics", help="topic contracts", arguments=arguments, run=run)
