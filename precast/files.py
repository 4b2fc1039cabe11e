"""Files that hold secrets (keys, passwords, token digests, a broker config with its password):
written whole or not at all, readable by their owner only."""

from __future__ import annotations

import os
from pathlib import Path


def write_private(path: Path, data: bytes | str) -> None:
    """Write `data` to `path` with mode 0600, atomically (a reader sees the old file or the new
    one, never half of one; the folder is created when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)
