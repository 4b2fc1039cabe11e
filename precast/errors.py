"""The project's exceptions. Entry points turn any `PrecastError` into one line and an exit code."""

from __future__ import annotations


class PrecastError(Exception):
    """Root of every error precast raises on purpose. `exit_code` is what a CLI exits with."""

    exit_code = 1


class ConfigError(PrecastError):
    """Settings or arguments that cannot work (bad value, contradictory options)."""

    exit_code = 2


class Unreachable(PrecastError):
    """A dependency (Kafka broker, Redis) did not answer within its timeout."""

    exit_code = 3

    def __init__(self, what: str, where: str, detail: str = "") -> None:
        self.what, self.where, self.detail = what, where, detail
        msg = f"{what} unreachable at {where}"
        super().__init__(f"{msg} ({detail})" if detail else msg)


class StackError(PrecastError):
    """The local development stack could not be started, stopped or inspected."""

    exit_code = 4


class TopicContractError(PrecastError):
    """An existing topic disagrees with its contract in a way that breaks correctness."""

    exit_code = 5
