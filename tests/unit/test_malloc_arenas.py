"""The read API caps glibc's malloc arenas at start (precast.runtime.limit_malloc_arenas), and
an operator's MALLOC_ARENA_MAX wins. Checked in a child process: the cap is process-wide."""

import subprocess
import sys

import pytest

CHILD = "from precast.runtime import limit_malloc_arenas; print(limit_malloc_arenas())"


def _run(env_extra: dict[str, str]) -> str:
    import os

    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env_extra
    out = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_cap_is_set_on_glibc_unless_the_environment_sets_one():
    assert _run({}) == "True"
    assert _run({"MALLOC_ARENA_MAX": "4"}) == "False"


def test_the_api_entry_point_caps_arenas_before_its_threads_start():
    import inspect

    from consumer_api import cli

    src = inspect.getsource(cli.main)
    assert src.index("limit_malloc_arenas()") < src.index("run_cli(")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_the_trim_thread_runs_and_trims():
    child = (
        "import threading, time; from precast.runtime import trim_malloc_every;"
        "ok = trim_malloc_every(0.05); time.sleep(0.3);"
        "print(ok, [t.name for t in threading.enumerate() if t.name == 'malloc-trim'])"
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True ['malloc-trim']"
