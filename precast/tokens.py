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
MAX_FILE_BYTES = 4 * 1024 * 1024  # ~40,000 tokens: a larger file is a mistake, not a table
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


def bearer(header: bytes | None) -> bytes | None:
    """The token an `Authorization: Bearer <token>` header carries, normalized as every reader
    of it must (the scheme's case, whitespace around the token), or None."""
    if not header or header[:7].lower() != b"bearer ":
        return None
    return header[7:].strip() or None


def generation(data: bytes | None) -> str:
    """What identifies the tokens file a table was read from (shown on the API's /healthz, so
    that `precast api-token revoke` can tell when the API has taken its change)."""
    return "absent" if data is None else hashlib.sha256(data).hexdigest()[:16]


class TokenTable:
    """The tokens a replica accepts: the tokens file (re-read when it changes) and, optionally,
    one token from the environment with every scope. Holds digests only.

    A file that becomes unreadable or invalid keeps the last good table (`error` says why); a
    file that is gone fails closed: none of its tokens is valid until it is back."""

    def __init__(self, path: Path | None = None, env_token: str | None = None) -> None:
        self.path = path
        self._env = Token("env", frozenset(SCOPES), digest(env_token)) if env_token else None
        self._stamp: tuple[int, int, int] | None = None
        self._by_digest: dict[bytes, Token] = {}
        self.generation = "none" if path is None else "absent"
        self.error: str | None = None
        self.reload(force=True)

    @property
    def enabled(self) -> bool:
        return self.path is not None or self._env is not None

    def __len__(self) -> int:
        return len(self._by_digest)

    def names(self) -> set[str]:
        return {t.name for t in self._by_digest.values()}

    def reload(self, force: bool = False) -> bool:
        """Re-read the file when it changed (mtime, size, inode); True when the accepted tokens
        changed. A file that cannot be used keeps the last good table and raises ConfigError
        (whatever the cause: missing permission, not UTF-8, a folder, a bad line); a file that
        is gone empties the file's part of the table first, then raises."""
        table: dict[bytes, Token] = {}
        if self._env is not None:
            table[self._env.digest] = self._env
        if self.path is not None:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                self._set(table, None, "absent")
                raise ConfigError(
                    f"tokens file {self.path} is gone: no token from it is valid until it is back"
                ) from None
            except OSError as exc:
                raise ConfigError(f"tokens file {self.path}: {exc.strerror}") from None
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            if stamp == self._stamp and not force:
                return False
            if st.st_size > MAX_FILE_BYTES:
                raise ConfigError(f"tokens file {self.path}: over {MAX_FILE_BYTES} bytes")
            try:
                data = self.path.read_bytes()
                text = data.decode()
            except OSError as exc:
                raise ConfigError(f"tokens file {self.path}: {exc.strerror or exc}") from None
            except UnicodeDecodeError as exc:
                raise ConfigError(
                    f"tokens file {self.path}: not UTF-8 (byte {exc.start})"
                ) from None
            for t in parse_file(text, self.path):
                table[t.digest] = t
            return self._set(table, stamp, generation(data))
        return self._set(table, None, "none")

    def _set(self, table: dict[bytes, Token], stamp: tuple[int, int, int] | None, gen: str) -> bool:
        changed = table.keys() != self._by_digest.keys() or any(
            table[d] != self._by_digest[d] for d in table
        )
        self._by_digest, self._stamp, self.generation = table, stamp, gen
        return changed

    def lookup(self, header: bytes | None) -> Token | None:
        """The token an `Authorization: Bearer <token>` header carries, or None. The digest of
        what the client sent is looked up (it reveals nothing about stored tokens), then
        compared in constant time."""
        token = bearer(header)
        if token is None:
            return None
        d = digest(token)
        found = self._by_digest.get(d)
        if found is None or not hmac.compare_digest(found.digest, d):
            return None
        return found
