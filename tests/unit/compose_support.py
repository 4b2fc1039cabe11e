"""Reading compose files as compose would, without a Docker engine: `${VAR:-default}` becomes
the default, `${VAR:?why}` (a required secret) a stand-in value, `$$` a literal `$`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
INTERPOLATED = re.compile(r"\$\{([A-Z0-9_]+)(:?[-?+])?([^}]*)\}")
STAND_IN = "stand-in-secret-0123456789"


def interpolate(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        return STAND_IN if m.group(2) in (":?", "?") else (m.group(3) or "")

    return INTERPOLATED.sub(one, value.replace("$$", "\0")).replace("\0", "$")


def load(name: str) -> dict[str, Any]:
    """The compose file with every value interpolated."""
    return interpolate(yaml.safe_load((ROOT / "compose" / name).read_text()))


def settings_env(svc: dict[str, Any]) -> dict[str, Any]:
    """The PRECAST_* environment of a service as nested settings keywords."""
    nested: dict[str, Any] = {}
    for key, value in svc.get("environment", {}).items():
        if not key.startswith("PRECAST_"):
            continue
        parts = key.removeprefix("PRECAST_").lower().split("__")
        d = nested
        for p in parts[:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = value
    return nested
