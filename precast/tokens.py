"""API bearer tokens: named, scoped, stored only as SHA-256 digests, rotatable without a restart.

A token is `pct_` + 32 random bytes (URL-safe base64): high entropy, so one unsalted SHA-256 is
enough to store it (a slow password hash such as scrypt protects guessable secrets; nobody
guesses 256 random bits, and the read path checks a token on every request). The tokens file
holds one token per line, never the token itself:

    # name   scopes               digest
    ui       read,prefetch        sha256:9f86d081884c7d65...
    ops-ui   read,prefetch,board  sha256:...

`precast api-token add NAME --scopes read,prefetch` prints a new token once and appends its
line; removing or replacing a line revokes or rotates it (the read API re-reads the file when
it changes, and on SIGHUP). Scopes: `read` (answers and their event stream), `prefetch`
(prefetch hints and UI beacons), `board` (the operations-center board's data and stream).
docs/security.md.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from precast.errors import ConfigError

SCOPES = ("read", "prefetch", "board")
PREFIX = "pct_"
MIN_LENGTH = 24  # a hand-chosen token shorter than this is a password, not a token
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")
# What compose defaults, examples and tired operators put in: never accepted as a token.
PLACEHOLDERS = frozenset(
    {
        "change-me",
        "changeme",
        "change_me",
        "secret",
        "token",
        "password",
        "admin",
        "test",
        "example",
        "default",
        "s3cret",
        "xxx",
        "todo",
        "none",
        "null",
    }
)


@dataclass(frozen=True)
class Token:
    name: str
    scopes: frozenset[str]
    digest: bytes  # SHA-256 of the token

    def allows(self, scope: str) -> bool:
        return scope in self.scopes


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def digest(token: str | bytes) -> bytes:
    return hashlib.sha256(token.encode() if isinstance(token, str) else token).digest()


def check_token(token: str, where: str) -> None:
    """Refuse what would make auth a formality: empty, whitespace, a placeholder, too short."""
    if not token or not token.strip():
        raise ConfigError(
            f"{where} is set but empty: that would turn authentication off; unset it (loopback "
            "only) or give a real token (`precast api-token new`)"
        )
    bare = token.strip().lower()
    if bare in PLACEHOLDERS or any(bare.startswith(p) for p in ("change-me", "changeme")):
        raise ConfigError(
            f"{where} is a placeholder, not a secret; `precast api-token new` makes one"
        )
    if token != token.strip() or any(c.isspace() or ord(c) < 0x21 or ord(c) > 0x7E for c in token):
        raise ConfigError(f"{where} must be printable ASCII without spaces")
    if len(token) < MIN_LENGTH:
        raise ConfigError(
            f"{where} is shorter than {MIN_LENGTH} characters; `precast api-token new`"
        )


def parse_scopes(text: str, where: str = "scopes") -> frozenset[str]:
    scopes = frozenset(s.strip() for s in text.split(",") if s.strip())
    unknown = sorted(scopes - set(SCOPES))
    if unknown or not scopes:
        raise ConfigError(
            f"{where}: {', '.join(unknown) or 'none given'}; known scopes are {', '.join(SCOPES)}"
        )
    return scopes


def parse_file(text: str, path: Path) -> list[Token]:
    """The tokens of a tokens file; a bad line is one error naming its number (never its
    content: it may be a pasted token)."""
    out: list[Token] = []
    names: set[str] = set()
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 3 or not _NAME.match(parts[0]) or not _DIGEST.match(parts[2]):
            raise ConfigError(
                f"{path}:{n}: expected `NAME SCOPES sha256:<64 hex>` (a token itself never goes "
                "in this file: `precast api-token add` writes its digest)"
            )
        if parts[0] in names:
            raise ConfigError(f"{path}:{n}: token name {parts[0]!r} appears twice")
        names.add(parts[0])
        scopes = parse_scopes(parts[1], f"{path}:{n}")
        out.append(Token(parts[0], scopes, bytes.fromhex(parts[2].removeprefix("sha256:"))))
    return out


def line_for(name: str, scopes: frozenset[str], token: str) -> str:
    if not _NAME.match(name):
        raise ConfigError(
            f"token name {name!r}: letters, digits, '.', '_' and '-' only (64 at most)"
        )
    ordered = ",".join(s for s in SCOPES if s in scopes)
    return f"{name} {ordered} sha256:{digest(token).hex()}"


class TokenTable:
    """The tokens a replica accepts: the tokens file (re-read when it changes) and, optionally,
    one token from the environment with every scope. Holds digests only."""

    def __init__(self, path: Path | None = None, env_token: str | None = None) -> None:
        self.path = path
        self._env = Token("env", frozenset(SCOPES), digest(env_token)) if env_token else None
        self._stamp: tuple[int, int, int] | None = None
        self._by_digest: dict[bytes, Token] = {}
        self.reload(force=True)

    @property
    def enabled(self) -> bool:
        return self.path is not None or self._env is not None

    def __len__(self) -> int:
        return len(self._by_digest)

    def reload(self, force: bool = False) -> bool:
        """Re-read the file when it changed (mtime, size, inode); True when the table changed.
        A file that became unreadable or invalid keeps the last good table and raises."""
        table: dict[bytes, Token] = {}
        if self._env is not None:
            table[self._env.digest] = self._env
        if self.path is not None:
            try:
                st = os.stat(self.path)
            except OSError as exc:
                raise ConfigError(f"tokens file {self.path}: {exc.strerror}") from None
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if stamp == self._stamp and not force:
                return False
            for t in parse_file(self.path.read_text(), self.path):
                table[t.digest] = t
            self._stamp = stamp
        self._by_digest = table
        return True

    def lookup(self, header: bytes | None) -> Token | None:
        """The token an `Authorization: Bearer <token>` header carries, or None. The digest of
        what the client sent is looked up (it reveals nothing about stored tokens), then
        compared in constant time."""
        if not header or header[:7].lower() != b"bearer ":
            return None
        d = digest(header[7:].strip())
        found = self._by_digest.get(d)
        if found is None or not hmac.compare_digest(found.digest, d):
            return None
        return found
