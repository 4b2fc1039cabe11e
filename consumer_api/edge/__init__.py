"""The HTTP edge every request crosses before a room answers it: the Host allow-list, error
hygiene and JSON error bodies, per-client limits, admission of costly reads, and the
validation of what clients send."""
