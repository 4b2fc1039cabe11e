"""Outcomes of a put-if-newer, shared by every store (and returned as-is by the Lua script)."""

STORED = 1  # the entry is now the stored one
OLDER = 0  # not strictly newer than what is stored (older or a duplicate): nothing changed
EXPIRED = -1  # already past valid_until + grace: not stored
# computed_at_ms ahead of the store's clock by more than schemas.events.MAX_AHEAD_MS: not stored
# (an answer from the future would win newest-wins over every real one until the clock caught up)
FUTURE = -2
