"""Registers the SRE subcommands on the `precast` CLI (one call from `opsctl.cli`)."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    from opsctl import (
        acls,
        api_tokens,
        audit,
        backfill,
        deadletters,
        fleet,
        lag,
        purge,
        rebuild,
        replay,
        shadow,
        train,
    )

    modules = (
        fleet,
        train,
        replay,
        backfill,
        shadow,
        deadletters,
        purge,
        rebuild,
        lag,
        audit,
        api_tokens,
        acls,
    )
    for module in modules:
        module.add_parser(sub)
