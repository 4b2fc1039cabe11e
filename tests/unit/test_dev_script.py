"""`./dev demo`'s first impression (issue 26): it names the board's URL before installing
anything, on the port the demo will use, and installs neither the browser nor the test tools.
The whole run (a fresh venv, the stack, the first served answer) is measured by hand (figures
in docs/board.md); `tests/integration/test_dev_stack_lifecycle.py` runs it (slow)."""

from __future__ import annotations

import re
import subprocess

import pytest

from opsctl.cli import build_parser
from tests.conftest import ROOT

DEV = ROOT / "dev"


def _function(name: str) -> str:
    text = DEV.read_text()
    body = re.search(rf"^{name}\(\) \{{\n.*?^\}}\n", text, re.S | re.M)
    assert body, f"dev has no function {name}"
    return body.group(0)


@pytest.mark.parametrize(
    "args",
    [[], ["--port", "9001"], ["--devices", "5", "--port=9002"], ["--port"]],
    ids=["default", "port", "port=", "dangling"],
)
def test_dev_names_the_port_the_demo_will_use(args):
    script = _function("demo_port") + 'demo_port "$@"\n'
    out = subprocess.run(
        ["bash", "-c", script, "dev", *args], capture_output=True, text=True, check=True
    ).stdout.strip()
    parsed = build_parser().parse_args(["demo", *args] if args != ["--port"] else ["demo"])
    assert out == str(parsed.port)


def test_the_demo_branch_says_the_url_first_and_installs_no_browser():
    text = DEV.read_text()
    branch = re.search(r"^  demo\)\n(.*?);;", text, re.S | re.M)
    assert branch, "dev has no demo branch"
    lines = [ln.strip() for ln in branch.group(1).splitlines() if ln.strip()]
    steps = [ln for ln in lines if not ln.startswith("#")]
    assert steps[0].startswith('say "board: http://127.0.0.1:$(demo_port "$@")/board/')
    assert 'setup_python ""' in steps  # the services only: no dev or train extras
    assert not any(s.split()[0] in ("setup", "setup_browser") for s in steps), steps
    # ... while the tests still get the browser through `setup`
    test_branch = re.search(r"^  test\)\n(.*?);;", text, re.S | re.M)
    assert test_branch and "    setup\n" in test_branch.group(1)
    assert "setup_browser" in _function("setup")
