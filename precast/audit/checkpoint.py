"""Signed checkpoints: the C2SP tlog-checkpoint body inside a C2SP signed note, Ed25519 keys.

Body (c2sp.org/tlog-checkpoint)::

    <origin>\\n<tree size, decimal>\\n<root hash, base64>\\n

Signed note (c2sp.org/signed-note): the body, an empty line, then one line per signature,
``— <key name> <base64(key ID ‖ signature)>``. The key ID is the first 4 bytes of
SHA-256(key name ‖ 0x0A ‖ 0x01 ‖ public key), 0x01 naming Ed25519. Keys travel in the same
textual forms as Go's `golang.org/x/mod/sumdb/note` (and so Tessera, Sigsum and witnesses):
``<name>+<key ID hex>+<base64(0x01 ‖ key)>``, the private one prefixed ``PRIVATE+KEY+``."""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from precast.audit.hashing import HASH_SIZE

ALG_ED25519 = 0x01
EM_DASH = "\u2014"


class CheckpointError(ValueError):
    """A checkpoint or key that is malformed, or a signature that does not match."""


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes

    def body(self) -> str:
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n"

    @classmethod
    def parse(cls, body: str) -> Checkpoint:
        lines = body.split("\n")
        if len(lines) < 4 or lines[-1] != "":
            raise CheckpointError("a checkpoint body is origin, size and root hash lines")
        origin, size, root = lines[0], lines[1], lines[2]
        if not origin or not size.isdigit() or (size != "0" and size.startswith("0")):
            raise CheckpointError(f"bad checkpoint origin or size: {origin!r} {size!r}")
        try:
            raw = base64.b64decode(root, validate=True)
        except binascii.Error:
            raise CheckpointError("checkpoint root hash is not base64") from None
        if len(raw) != HASH_SIZE:
            raise CheckpointError("checkpoint root hash is not 32 bytes")
        return cls(origin, int(size), raw)


def _check_name(name: str) -> str:
    if not name or any(c.isspace() or c == "+" for c in name):
        raise CheckpointError(f"key name {name!r} must be non-empty, without spaces or '+'")
    return name


def key_id(name: str, public_key: bytes) -> bytes:
    return sha256(name.encode() + b"\n" + bytes([ALG_ED25519]) + public_key).digest()[:4]


class Verifier:
    def __init__(self, name: str, public_key: bytes) -> None:
        self.name = _check_name(name)
        self.key_id = key_id(name, public_key)
        self._key = Ed25519PublicKey.from_public_bytes(public_key)
        self.public_key = public_key

    def encode(self) -> str:
        return f"{self.name}+{self.key_id.hex()}+{base64.b64encode(bytes([ALG_ED25519]) + self.public_key).decode()}"

    @classmethod
    def parse(cls, text: str) -> Verifier:
        parts = text.strip().split("+", 2)  # the base64 may hold a '+'
        if len(parts) != 3:
            raise CheckpointError("a verifier key reads <name>+<key id hex>+<base64 key>")
        name, kid, b64 = parts
        try:
            raw = base64.b64decode(b64, validate=True)
        except binascii.Error:
            raise CheckpointError("verifier key is not base64") from None
        if len(raw) != 33 or raw[0] != ALG_ED25519:
            raise CheckpointError("verifier key is not an Ed25519 key")
        v = cls(name, raw[1:])
        if v.key_id.hex() != kid.lower():
            raise CheckpointError("verifier key ID does not match its name and key")
        return v

    def verify(self, message: bytes, signature: bytes) -> bool:
        try:
            self._key.verify(signature, message)
        except InvalidSignature:
            return False
        return True


class Signer:
    def __init__(self, name: str, private_key: Ed25519PrivateKey) -> None:
        self.name = _check_name(name)
        self._key = private_key
        pub = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.verifier = Verifier(name, pub)

    @classmethod
    def generate(cls, name: str) -> Signer:
        return cls(name, Ed25519PrivateKey.generate())

    def encode(self) -> str:
        from cryptography.hazmat.primitives.serialization import NoEncryption, PrivateFormat

        seed = self._key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        b64 = base64.b64encode(bytes([ALG_ED25519]) + seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.verifier.key_id.hex()}+{b64}"

    @classmethod
    def parse(cls, text: str) -> Signer:
        parts = text.strip().split("+", 4)  # the base64 may hold a '+'
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise CheckpointError("a signing key reads PRIVATE+KEY+<name>+<key id>+<base64 key>")
        try:
            raw = base64.b64decode(parts[4], validate=True)
        except binascii.Error:
            raise CheckpointError("signing key is not base64") from None
        if len(raw) != 33 or raw[0] != ALG_ED25519:
            raise CheckpointError("signing key is not an Ed25519 key")
        signer = cls(parts[2], Ed25519PrivateKey.from_private_bytes(raw[1:]))
        if signer.verifier.key_id.hex() != parts[3].lower():
            raise CheckpointError("signing key ID does not match its name and key")
        return signer

    def sign_text(self, text: str) -> str:
        """A signed note of `text` (which ends with a newline)."""
        if not text.endswith("\n"):
            raise CheckpointError("a note's text ends with a newline")
        sig = self._key.sign(text.encode())
        line = base64.b64encode(self.verifier.key_id + sig).decode()
        return f"{text}\n{EM_DASH} {self.name} {line}\n"

    def sign(self, checkpoint: Checkpoint) -> str:
        """The signed note of `checkpoint`."""
        return self.sign_text(checkpoint.body())


def open_text(note: str, verifier: Verifier) -> str:
    """The text of a signed note, once a signature by `verifier` matches it; `CheckpointError`
    otherwise (unsigned, signed by another key, or altered)."""
    body, sep, sigs = note.rpartition("\n\n")
    if not sep or not sigs.endswith("\n"):
        raise CheckpointError("not a signed note (no empty line before the signatures)")
    body += "\n"
    for line in sigs[:-1].split("\n"):
        dash, _, rest = line.partition(" ")
        name, _, b64 = rest.partition(" ")
        if dash != EM_DASH or not b64:
            raise CheckpointError(f"malformed signature line {line!r}")
        if name != verifier.name:
            continue
        try:
            raw = base64.b64decode(b64, validate=True)
        except binascii.Error:
            raise CheckpointError("signature is not base64") from None
        if raw[:4] == verifier.key_id and verifier.verify(body.encode(), raw[4:]):
            return body
    raise CheckpointError(f"signature does not match the key {verifier.name}")


def open_note(note: str, verifier: Verifier) -> Checkpoint:
    """The checkpoint of a signed note whose signature by `verifier` matches (`CheckpointError`
    otherwise). Its origin line must be the key's name, as C2SP tlog-checkpoint asks."""
    checkpoint = Checkpoint.parse(open_text(note, verifier))
    if checkpoint.origin != verifier.name:
        raise CheckpointError(
            f"checkpoint origin {checkpoint.origin!r} is not the key's {verifier.name!r}"
        )
    return checkpoint


def load_or_create_signer(path: Path, name: str) -> Signer:
    """The signing key at `path`; a new one (mode 0600, verifier key beside it as `.pub`) when
    the file does not exist yet. A key whose name is not `name` is refused: the origin line of
    every checkpoint is the key name."""
    if path.exists():
        signer = Signer.parse(path.read_text())
        if signer.name != name:
            raise CheckpointError(f"the key in {path} is for origin {signer.name!r}, not {name!r}")
        return signer
    signer = Signer.generate(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(signer.encode() + "\n")
    public_path(path).write_text(signer.verifier.encode() + "\n")
    return signer


def public_path(key_path: Path) -> Path:
    return key_path.with_name(key_path.name + ".pub")
