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
        lag,
        purge,
        rebuild,
        replay,
        shadow,
    )

    for module in (
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
    ):
        module.add_parser(sub)
