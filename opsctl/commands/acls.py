"""`precast acls show | apply | missing | users`: the Kafka ACLs each component's principal needs
for this deployment's topic prefix (schemas.access: nothing more), printed, created through the
admin API (run it as a principal that may alter ACLs), or compared with what the cluster has;
`users` creates (or gives a new password to) each component's SCRAM user from `COMPONENT=PASSWORD`
lines on standard input, so that no password is ever an argument (`ps` shows arguments).
Principals default to `User:<component>`; `--principal worker=User:svc-worker` renames one.
docs/security.md."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from opsctl.commands.base import Command
from opsctl.settings import StackCliSettings
from precast.errors import ConfigError
from precast.telemetry.progress import table
from schemas.access import COMPONENTS, Grant, grants, principal_for


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["show", "apply", "missing", "users"])
    parser.add_argument(
        "--component", action="append", choices=sorted(COMPONENTS), help="only these (repeat)"
    )
    parser.add_argument(
        "--principal",
        action="append",
        default=[],
        metavar="COMPONENT=PRINCIPAL",
        help="the principal a component runs as, e.g. worker=User:svc-worker",
    )


def _overrides(args: argparse.Namespace) -> dict[str, str]:
    overrides = {}
    for item in args.principal:
        component, sep, principal = item.partition("=")
        if not sep or component not in COMPONENTS or ":" not in principal:
            raise ConfigError(f"--principal {item!r}: expected COMPONENT=User:NAME")
        overrides[component] = principal
    return overrides


def wanted(args: argparse.Namespace, settings: StackCliSettings) -> list[Grant]:
    overrides = _overrides(args)
    cat = settings.topics.catalog()
    out: list[Grant] = []
    for name in args.component or sorted(COMPONENTS):
        out += grants(
            COMPONENTS[name], cat, principal_for(name, overrides), settings.kafka.group_prefix
        )
    return out


def _rows(gs: list[Grant]) -> list[list[str]]:
    return [[g.principal, g.resource, g.pattern, g.name, g.operation] for g in gs]


def read_passwords(lines: Iterable[str]) -> dict[str, str]:
    """`COMPONENT=PASSWORD` lines (blank lines and `#` comments skipped); the error names the
    line number, never its content."""
    out: dict[str, str] = {}
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        component, sep, password = line.partition("=")
        if not sep or component not in COMPONENTS:
            raise ConfigError(
                f"standard input line {n}: expected COMPONENT=PASSWORD with COMPONENT one of "
                f"{', '.join(sorted(COMPONENTS))}"
            )
        if len(password) < 12:
            raise ConfigError(f"standard input line {n}: the password of {component} is short")
        out[component] = password
    if not out:
        raise ConfigError("no COMPONENT=PASSWORD line on standard input")
    return out


def users(args: argparse.Namespace, settings: StackCliSettings) -> int:
    from precast.kafka import Admin
    from precast.kafka.access import upsert_scram_user

    overrides = _overrides(args)
    passwords = read_passwords(sys.stdin)
    admin = Admin(settings.kafka)
    admin.wait_reachable()
    for component, password in sorted(passwords.items()):
        user = principal_for(component, overrides).split(":", 1)[1]
        upsert_scram_user(admin, user, password)
    print(f"{len(passwords)} SCRAM users set ({', '.join(sorted(passwords))}) as {admin.principal}")
    return 0


def run(args: argparse.Namespace, settings: StackCliSettings) -> int:
    if args.action == "users":
        return users(args, settings)
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


COMMAND = Command(
    "acls",
    help="the Kafka ACLs of each component",
    description=__doc__,
    arguments=arguments,
    run=run,
)
