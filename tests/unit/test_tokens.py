"""API tokens: what is refused as a token, the tokens file (digests only, one error per bad line
without its content), lookups by the Authorization header, and `precast api-token`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from precast.errors import ConfigError
from precast.tokens import TokenTable, check_token, digest, line_for, new_token, parse_file


@pytest.mark.parametrize(
    "token",
    ["", "   ", "change-me", "CHANGEME", "change-me-please-now-really", "secret", "short-but-real"],
)
def test_empty_placeholder_and_short_tokens_are_refused(token):
    with pytest.raises(ConfigError):
        check_token(token, "PRECAST_API__AUTH_TOKEN")


def test_a_new_token_is_accepted_and_differs_every_time():
    a, b = new_token(), new_token()
    check_token(a, "x")
    assert a != b and a.startswith("pct_") and len(a) >= 40


def test_the_file_holds_digests_and_a_bad_line_never_shows_its_content(tmp_path):
    t = new_token()
    f = tmp_path / "tokens"
    f.write_text(f"# comment\n{line_for('ui', frozenset({'read', 'prefetch'}), t)}\n")
    assert t not in f.read_text() and digest(t).hex() in f.read_text()
    [tok] = parse_file(f.read_text(), f)
    assert tok.name == "ui" and tok.scopes == {"read", "prefetch"}
    f.write_text(f"ui read {t}\n")  # someone pasted the token itself
    with pytest.raises(ConfigError) as exc:
        parse_file(f.read_text(), f)
    assert t not in str(exc.value) and ":1:" in str(exc.value)
    with pytest.raises(ConfigError, match="known scopes"):
        parse_file(f"ui admin sha256:{'0' * 64}\n", f)
    with pytest.raises(ConfigError, match="twice"):
        parse_file(f"a read sha256:{'0' * 64}\na read sha256:{'1' * 64}\n", f)


def test_lookup_by_header(tmp_path):
    t = new_token()
    f = tmp_path / "tokens"
    f.write_text(line_for("ui", frozenset({"read"}), t) + "\n")
    table = TokenTable(f, env_token=None)
    assert table.lookup(f"Bearer {t}".encode()).name == "ui"
    assert table.lookup(f"bearer {t}".encode()).name == "ui"  # the scheme is case-insensitive
    for header in (None, b"", t.encode(), b"Bearer ", b"Bearer wrong", f"Basic {t}".encode()):
        assert table.lookup(header) is None
    env = new_token()
    both = TokenTable(f, env_token=env)
    assert both.lookup(f"Bearer {env}".encode()).scopes == {"read", "prefetch", "board"}
    assert not TokenTable(None, None).enabled


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "opsctl.cli", "api-token", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_api_token_command_adds_lists_and_revokes(tmp_path):
    f = tmp_path / "t" / "tokens"
    added = _cli("add", "ui", "--scopes", "read,prefetch", "--file", str(f))
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    assert token.startswith("pct_") and token not in f.read_text()
    assert oct(f.stat().st_mode & 0o777) == "0o600"
    assert TokenTable(f).lookup(f"Bearer {token}".encode()).name == "ui"
    again = _cli("add", "ui", "--scopes", "read", "--file", str(f))
    assert again.returncode == 2 and "already has" in again.stderr
    bad = _cli("add", "x", "--scopes", "root", "--file", str(f))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    listed = _cli("list", "--file", str(f))
    assert "ui" in listed.stdout and "prefetch,read" in listed.stdout and token not in listed.stdout
    assert _cli("revoke", "ui", "--file", str(f), "--wait", "0").returncode == 0
    assert TokenTable(f).lookup(f"Bearer {token}".encode()) is None
