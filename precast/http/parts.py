"""Background parts a process's HTTP server starts itself (precast.http.reaper), so that the
app's readiness can reflect them as it does its own (precast.supervise: a part that gave up
turns readiness false while the process ends)."""

from __future__ import annotations

from precast.supervise import Supervised

PARTS: list[Supervised] = []


def down(parts: list[Supervised]) -> list[str]:
    """The names of the parts (given, and the server's own) that failed too often."""
    return [p.part for p in (*parts, *PARTS) if not p.healthy]
