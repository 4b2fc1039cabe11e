"""The `precast` subcommands, one module each over `opsctl.commands.base.Command` (the way
faust's `cli/` holds one module per `faust` command). What several commands share lives in
`opsctl.toolkit`. A command module may use the toolkit and another command's module when it
runs that command as a step (promote runs the shadow gate; `deadletters redrive` is
redrive.py's run); the toolkit never imports a command."""

from __future__ import annotations

from opsctl.commands.base import Command


def registry() -> tuple[Command, ...]:
    """Every command, in the order `precast --help` lists them."""
    from opsctl.commands import (
        acls,
        api_tokens,
        audit,
        backfill,
        dataset,
        deadletters,
        demo,
        features,
        fleet_spec,
        lag,
        observe,
        promote,
        purge,
        rebuild,
        replay,
        schemas,
        shadow,
        stack,
        topics,
        trainer,
    )

    return (
        stack.COMMAND,
        topics.COMMAND,
        demo.COMMAND,
        observe.COMMAND,
        schemas.COMMAND,
        fleet_spec.COMMAND,
        features.COMMAND,
        trainer.TRAIN,
        trainer.DISTILL,
        trainer.QUANTIZE,
        trainer.MODEL,
        replay.COMMAND,
        backfill.COMMAND,
        shadow.COMMAND,
        deadletters.COMMAND,
        purge.COMMAND,
        rebuild.COMMAND,
        lag.COMMAND,
        audit.COMMAND,
        api_tokens.COMMAND,
        acls.COMMAND,
        dataset.COMMAND,
        promote.COMMAND,
    )
