"""Text from outside (a client's path, a record's field, an exception that quotes either) on its
way into a log line: printable ASCII only, control characters and everything else escaped, cut
to a bound, so it can neither forge a log line (a newline), repaint a terminal (ANSI escapes)
nor flood the log."""

from __future__ import annotations


def printable(text: object, limit: int = 120) -> str:
    """`text` as one safe line: `\\n`, `\\x1b`, `\\u2028` and the like escaped, at most
    `limit` characters of the original (an ellipsis says it was cut)."""
    raw = str(text)
    cut = raw[:limit]
    out = cut.encode("ascii", "backslashreplace").decode("ascii")
    if not out.isprintable():  # (of ASCII text: every character in 0x20-0x7e) the rare case
        out = "".join(c if 0x20 <= ord(c) < 0x7F else f"\\x{ord(c):02x}" for c in out)
    return out + ("..." if len(raw) > limit else "")
