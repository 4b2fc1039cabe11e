"""The layout of a model registry folder, shared by the worker that serves from it
(`workers.model.registry`) and the operator tools that change it (`precast promote`):

    <registry>/<version>/model.onnx, manifest.json, metrics.json ...   one folder per version
    <registry>/ACTIVE                                                    the version to serve
    <registry>/PROMOTIONS.jsonl                                          who changed ACTIVE, when, why

Without ACTIVE the highest semantic version with a manifest serves. ACTIVE names one version
folder of the registry and nothing else (a semantic version, no separator, nothing outside the
registry even through a symlink): anything else is a `RegistryError`, never a path to load. ACTIVE
is replaced
atomically (a worker polling it never reads half a name); the promotions log is append-only,
one JSON object per line: the audit trail of every promotion, refusal, forced promotion and
roll-back (docs/sre.md, "Learn from outcomes").
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from precast.errors import PrecastError

ACTIVE_FILE = "ACTIVE"
PROMOTIONS_FILE = "PROMOTIONS.jsonl"
_SEMVER = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?")
# An ACTIVE longer than this is not a version name; it is not read further.
_ACTIVE_MAX_BYTES = 128


class RegistryError(PrecastError):
    """The registry's ACTIVE file names something that is not one of its version folders."""

    exit_code = 2


def semver_key(version: str) -> tuple[Any, ...] | None:
    """Sort key for `MAJOR.MINOR.PATCH[-pre]`; a pre-release sorts before its release."""
    # fullmatch: `$` would also accept a trailing newline.
    m = _SEMVER.fullmatch(version)
    if not m:
        return None
    major, minor, patch, pre = m.groups()
    pre_key = (
        (1,)
        if pre is None
        else (0, *((0, int(p)) if p.isdigit() else (1, p) for p in pre.split(".")))
    )
    return (int(major), int(minor), int(patch), pre_key)


def versions(registry: Path) -> list[str]:
    """Version folders that hold a manifest, lowest semantic version first."""
    try:
        found = [
            (key, p.name)
            for p in registry.iterdir()
            if (p / "manifest.json").is_file() and (key := semver_key(p.name)) is not None
        ]
    except OSError:
        return []
    return [name for _, name in sorted(found)]


def active_version(registry: Path) -> str | None:
    """What ACTIVE names, None without one (or an empty one); `RegistryError` when its content
    is not the name of a version folder inside the registry."""
    where = registry / ACTIVE_FILE
    try:
        with where.open("rb") as f:
            raw = f.read(_ACTIVE_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        # Unreadable is not absent: falling back to the highest version would serve a model
        # nobody chose.
        raise RegistryError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) > _ACTIVE_MAX_BYTES:
        raise RegistryError(f"{where}: longer than {_ACTIVE_MAX_BYTES} bytes, not a version name")
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise RegistryError(f"{where}: not UTF-8, not a version name") from None
    if not text:
        return None
    return check_version(registry, text)


def check_version(registry: Path, name: str) -> str:
    """`name` if it can only mean a version folder inside `registry`, else `RegistryError`:
    a semantic version (so no separator, no `..`, not absolute), and where the folder exists,
    one whose real location is directly inside the registry (no symlink out of it)."""
    if semver_key(name) is None:
        raise RegistryError(
            f"{registry / ACTIVE_FILE}: {name!r} is not a version folder name "
            "(MAJOR.MINOR.PATCH[-pre]); refusing to load it"
        )
    folder = registry / name
    if folder.exists() or folder.is_symlink():
        try:
            inside = folder.resolve(strict=True).parent == registry.resolve(strict=True)
        except (OSError, RuntimeError):
            inside = False
        if not inside or not folder.is_dir():
            raise RegistryError(
                f"{registry / ACTIVE_FILE}: {name!r} is not a folder inside the registry; "
                "refusing to load it"
            )
    return name


def wanted_version(registry: Path) -> str | None:
    """The version the registry says to serve: ACTIVE's content, else the highest semver
    folder that has a manifest."""
    active = active_version(registry)
    if active:
        return active
    have = versions(registry)
    return have[-1] if have else None


def write_active(registry: Path, version: str) -> None:
    """Point ACTIVE at `version`: a temporary file renamed over it, so it changes at once."""
    check_version(registry, version)
    tmp = registry / f".{ACTIVE_FILE}.{os.getpid()}.tmp"
    tmp.write_text(version + "\n")
    os.replace(tmp, registry / ACTIVE_FILE)


def record(registry: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """Append one entry (stamped with the time) to the promotions log; returns it."""
    doc = {"at_ms": int(time.time() * 1000), **entry}
    with open(registry / PROMOTIONS_FILE, "a") as f:
        f.write(json.dumps(doc, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return doc


def history(registry: Path) -> list[dict[str, Any]]:
    """Every entry of the promotions log, oldest first (an unreadable line is skipped)."""
    try:
        lines = (registry / PROMOTIONS_FILE).read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def serving_since(registry: Path, version: str) -> dict[str, Any] | None:
    """The log entry that made `version` the active one (the newest such), if any."""
    found: dict[str, Any] | None = None
    for doc in history(registry):
        if doc.get("version") == version and doc.get("action") in ("promote", "rollback"):
            found = doc
    return found
