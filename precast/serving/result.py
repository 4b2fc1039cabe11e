"""Outcomes of a put-if-newer, shared by every store (and returned as-is by the Lua script)."""

STORED = 1  # the entry is now the stored one
OLDER = 0  # not strictly newer than what is stored (older or a duplicate): nothing changed
EXPIRED = -1  # already past valid_until + grace: not stored
