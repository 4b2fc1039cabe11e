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
        promote,
        purge,
        rebuild,
        replay,
        shadow,
        train,
    )
    from opsctl.dataset import cli as dataset

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
    for module in (*modules, dataset, promote):
        module.add_parser(sub)
