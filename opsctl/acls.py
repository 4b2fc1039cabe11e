"""`precast acls show | apply | missing`: the Kafka ACLs each component's principal needs for
this deployment's topic prefix (schemas.access: nothing more), printed, created through the
admin API (run it as a principal that may alter ACLs), or compared with what the cluster has.
Principals default to `User:<component>`; `--principal worker=User:svc-worker` renames one.
docs/security.md."""

from __future__ import annotations

import argparse
from typing import Any

from opsctl.settings import StackCliSettings
from precast.errors import ConfigError
from precast.progress import table
from schemas.access import COMPONENTS, Grant, grants, principal_for
from schemas.topics import catalog


def add_parser(sub: Any) -> None:
    ap = sub.add_parser("acls", help="the Kafka ACLs of each component", description=__doc__)
    ap.add_argument("action", choices=["show", "apply", "missing"])
    ap.add_argument(
        "--component", action="append", choices=sorted(COMPONENTS), help="only these (repeat)"
    )
    ap.add_argument(
        "--principal",
        action="append",
        default=[],
        metavar="COMPONENT=PRINCIPAL",
        help="the principal a component runs as, e.g. worker=User:svc-worker",
    )
    ap.set_defaults(fn=run)


def wanted(args: argparse.Namespace, settings: StackCliSettings) -> list[Grant]:
    overrides = {}
    for item in args.principal:
        component, sep, principal = item.partition("=")
        if not sep or component not in COMPONENTS or ":" not in principal:
            raise ConfigError(f"--principal {item!r}: expected COMPONENT=User:NAME")
        overrides[component] = principal
    t = settings.topics
    cat = catalog(t.prefix, t.partitions, t.replication_factor)
    out: list[Grant] = []
    for name in args.component or sorted(COMPONENTS):
        out += grants(
            COMPONENTS[name], cat, principal_for(name, overrides), settings.kafka.group_prefix
        )
    return out


def _rows(gs: list[Grant]) -> list[list[str]]:
    return [[g.principal, g.resource, g.pattern, g.name, g.operation] for g in gs]


def run(args: argparse.Namespace, settings: StackCliSettings) -> int:
    want = wanted(args, settings)
    head = ["principal", "resource", "pattern", "name", "operation"]
    if args.action == "show":
        print(table(head, _rows(want)))
        print(
            f"{len(want)} ACLs for prefix {settings.topics.prefix!r}, groups "
            f"{settings.kafka.group_prefix!r} (ALLOW, any host)"
        )
        return 0
    from precast.kafka import Admin
    from precast.kafka.access import apply_grants, existing_grants

    admin = Admin(settings.kafka)
    admin.wait_reachable()
    have = set(existing_grants(admin))
    missing = [g for g in want if g not in have]
    if args.action == "missing":
        if missing:
            print(table(head, _rows(missing)))
        print(f"{len(missing)} of {len(want)} ACLs missing on {settings.kafka.bootstrap_servers}")
        return 1 if missing else 0
    apply_grants(admin, missing)
    print(
        f"created {len(missing)} ACLs ({len(want) - len(missing)} were there) as {admin.principal}"
    )
    return 0
