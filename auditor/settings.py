"""Settings of the auditor process (built once, in `auditor.cli`). The `audit` block is shared
with `precast audit` (precast/audit/settings.py)."""

from __future__ import annotations

from precast.audit.settings import AuditSettings
from precast.settings import CommonSettings


class AuditorSettings(CommonSettings):
    audit: AuditSettings = AuditSettings()
