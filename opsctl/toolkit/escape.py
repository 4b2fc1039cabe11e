"""Record content on its way to the operator's terminal: anyone who can write a topic writes the
keys, header values and details a CLI prints, and a key holding ANSI escapes or a newline
would repaint the terminal or forge a line. Every CLI prints such text through precast.hygiene.printable
(control characters and non-ASCII escaped, cut to a bound); tables through `rows` here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from precast.hygiene import printable

CELL = 80  # characters of the original shown in a table cell


def rows(table_rows: Iterable[Sequence[Any]], limit: int = CELL) -> list[list[Any]]:
    """Table rows with every text cell escaped (numbers stay numbers, for alignment)."""
    return [[printable(v, limit) if isinstance(v, str) else v for v in r] for r in table_rows]
