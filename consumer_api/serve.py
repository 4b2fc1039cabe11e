"""The read API's server: `precast.http.serve` (shared with the auditor, which gets the same
connection, header and body limits) with the limits of PRECAST_API__*."""

from __future__ import annotations

from precast.http.serve import ServerLimits, check_bind, raise_open_files, serve

__all__ = ["ServerLimits", "check_bind", "raise_open_files", "serve"]
