"""A bad command line is one line on stderr and exit 2, for every entry point."""

import os
import subprocess
import sys

import pytest

ENTRY_POINTS = [
    "opsctl.cli",
    "producers.cli",
    "workers.precompute.cli",
    "consumer_api.cli",
    "workers.context.aggregator",
    "workers.precompute.backfill",
    "workers.gpu_check",
]


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_unknown_flag_is_one_line(module):
    run = subprocess.run(
        [sys.executable, "-m", module, "--no-such-flag"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert "error:" in lines[0] and "--help" in lines[0]


def test_subcommand_errors_are_one_line_too():
    run = subprocess.run(
        [sys.executable, "-m", "opsctl.cli", "purge", "--what"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
    assert run.stderr.startswith("precast purge: error:")


@pytest.mark.parametrize(
    "module",
    ["producers.cli", "workers.precompute.cli", "consumer_api.cli", "opsctl.cli topics ensure"],
)
def test_kafka_configuration_librdkafka_refuses_is_one_line(module):
    # librdkafka validates pass-through properties when a client is built, before any connection
    run = subprocess.run(
        [sys.executable, "-m", *module.split()],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PRECAST_KAFKA__EXTRA": '{"no.such.prop": "1"}'},
    )
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and 'configuration refused: No such configuration property: "no.such.prop"' in lines[0]
    )


@pytest.mark.parametrize(
    "env, says",
    [
        ({"PRECAST_API__AUTH_TOKEN": ""}, "set but empty"),
        ({"PRECAST_API__AUTH_TOKEN": "change-me"}, "placeholder"),
        ({"PRECAST_API__AUTH_TOKEN": "  "}, "set but empty"),
        ({"PRECAST_API__HOST": "0.0.0.0"}, "beyond loopback, without a token"),
        (
            {"PRECAST_API__HOST": "::", "PRECAST_API__PORT": "8111"},
            "beyond loopback, without a token",
        ),
    ],
)
def test_the_api_refuses_open_doors_in_one_line(env, says):
    """An empty token (what `${VAR:-}` in a compose file gives), a placeholder, or a
    non-loopback address without any token: the API does not start."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PRECAST_API__")}
    run = subprocess.run(
        [sys.executable, "-m", "consumer_api.cli"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, **env},
    )
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], run.stderr
    assert "change-me" not in lines[0]  # a refused value is never echoed
