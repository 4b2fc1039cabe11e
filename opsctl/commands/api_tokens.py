"""`precast api-token new | add | list | revoke`: the read API's bearer tokens (precast.tokens).

`add` makes a token, writes only its SHA-256 digest to the tokens file (mode 0600, replaced
atomically) and prints the token once; `revoke` removes a line; a running API re-reads the file
within a second (or on SIGHUP), so adding, rotating (add a new name, move the clients, revoke the
old) and revoking need no restart. `revoke` then asks each API (`--api`) which tokens file it
serves from (its /healthz `tokens`) and says whether it has taken the change: exit 1 when one
has not, or did not answer. docs/security.md."""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from opsctl.commands.base import Action, Command
from opsctl.settings import StackCliSettings
from precast.errors import ConfigError
from precast.files import write_private
from precast.hygiene import printable
from precast.telemetry.progress import table
from precast.tokens import SCOPES, generation, line_for, new_token, parse_file, parse_scopes


def _file_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--file", required=True, type=Path, help="the tokens file (PRECAST_API__TOKENS_FILE)"
    )


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    _file_argument(parser)
    parser.add_argument("name")
    parser.add_argument("--scopes", required=True, help=f"comma-separated: {', '.join(SCOPES)}")


def _revoke_arguments(parser: argparse.ArgumentParser) -> None:
    _file_argument(parser)
    parser.add_argument("name")
    parser.add_argument(
        "--api",
        action="append",
        default=None,
        metavar="URL",
        help="a running API to confirm the revoke with (its /healthz names the tokens "
        "file it serves from); repeat for each replica; default http://127.0.0.1:8000",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=5.0,
        help="seconds to wait for each API to take it (default 5; 0: do not ask)",
    )


def _lines(path: Path) -> list[str]:
    if not path.exists():
        return []
    text = path.read_text()
    parse_file(text, path)  # refuse to edit a file the API would refuse
    return text.splitlines()


def _write(path: Path, lines: list[str]) -> None:
    # atomic: the API re-reading it sees the old file or the new one, never half of one
    write_private(path, "".join(line + "\n" for line in lines))


def run_new(args: argparse.Namespace, settings: StackCliSettings) -> int:
    print(new_token())
    return 0


def run_add(args: argparse.Namespace, settings: StackCliSettings) -> int:
    lines = _lines(args.file)
    if any(ln.split()[:1] == [args.name] for ln in lines):
        raise ConfigError(f"{args.file} already has a token named {args.name!r}; revoke it first")
    token = new_token()
    header = ["# name scopes digest (precast api-token; the tokens themselves are never stored)"]
    _write(args.file, (lines or header) + [line_for(args.name, parse_scopes(args.scopes), token)])
    print(token)
    print(
        f"added {args.name!r} ({args.scopes}) to {args.file}; this is the only time the token "
        "is shown",
        file=sys.stderr,
    )
    return 0


def run_list(args: argparse.Namespace, settings: StackCliSettings) -> int:
    tokens = parse_file(args.file.read_text(), args.file) if args.file.exists() else []
    print(table(["name", "scopes"], [[t.name, ",".join(sorted(t.scopes))] for t in tokens]))
    return 0


def run_revoke(args: argparse.Namespace, settings: StackCliSettings) -> int:
    lines = _lines(args.file)
    kept = [ln for ln in lines if ln.split()[:1] != [args.name]]
    if len(kept) == len(lines):
        raise ConfigError(f"{args.file} has no token named {args.name!r}")
    _write(args.file, kept)
    print(f"revoked {args.name!r} in {args.file}")
    if args.wait <= 0:
        print("not confirmed with a running API (--wait 0): it re-reads the file within a second")
        return 0
    want = generation(args.file.read_bytes())
    failed = 0
    for url in args.api or ["http://127.0.0.1:8000"]:
        seen = _wait_for(url.rstrip("/"), want, args.wait)
        if seen == want:
            print(f"{url}: has taken it (tokens file {want})")
        elif seen is None:
            print(f"{url}: no answer; nothing confirms that it has taken it", file=sys.stderr)
            failed += 1
        else:
            print(
                f"{url}: still serves tokens file {printable(seen, 40)} after {args.wait:g} s, "
                f"not {want}: the revoked token may still work there (its log says why: "
                "'tokens file not re-read'; mounted the same file?)",
                file=sys.stderr,
            )
            failed += 1
    return 1 if failed else 0


def _wait_for(url: str, want: str, wait_s: float) -> str | None:
    """The tokens-file generation the API at `url` reports once it is `want`, or the last one
    it reported when `wait_s` ran out (None: it never answered)."""
    deadline = time.monotonic() + wait_s
    seen: str | None = None
    while True:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2.0) as r:  # noqa: S310
                seen = _generation_of(r.read(65_536))
        except urllib.error.HTTPError as exc:  # 503: not healthy, its body still says
            seen = _generation_of(exc.read(65_536))
        except (OSError, ValueError):
            pass
        if seen == want or time.monotonic() >= deadline:
            return seen
        time.sleep(0.2)


def _generation_of(body: bytes) -> str | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return str(doc.get("tokens")) if isinstance(doc, dict) else None


COMMAND = Command(
    "api-token",
    help="the read API's bearer tokens",
    description=__doc__,
    actions=(
        Action("new", help="print a fresh token (stored nowhere)", run=run_new),
        Action(
            "add",
            help="make a token, store its digest, print it once",
            run=run_add,
            arguments=_add_arguments,
        ),
        Action(
            "list",
            help="names and scopes in the tokens file",
            run=run_list,
            arguments=_file_argument,
        ),
        Action(
            "revoke",
            help="remove a token from the tokens file",
            run=run_revoke,
            arguments=_revoke_arguments,
        ),
    ),
)
