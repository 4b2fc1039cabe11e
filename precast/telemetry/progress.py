"""Progress bars for long SRE work and the summary table each command ends with."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from tqdm import tqdm


class _LogLines:
    """Progress for logs (CI, a pipe): one plain line every few seconds, no carriage returns."""

    def __init__(self, total: int | None, desc: str, unit: str, every_s: float = 10.0) -> None:
        self.total, self.desc, self.unit, self.every_s = total, desc, unit, every_s
        self.n = 0
        self._t0 = self._last = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            rate = self.n / max(now - self._t0, 1e-9)
            of = f"/{self.total:,} ({100 * self.n / self.total:.0f}%)" if self.total else ""
            print(
                f"{self.desc}: {self.n:,}{of} {self.unit}, {rate:,.0f} {self.unit}/s",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        pass


def bar(total: int | None, desc: str, unit: str = "rec", enabled: bool = True) -> Any:
    """A progress bar on stderr: tqdm on a terminal, a line every few seconds in a log."""
    if not sys.stderr.isatty():
        return (
            _LogLines(total, desc, unit)
            if enabled
            else _LogLines(total, desc, unit, every_s=float("inf"))
        )
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=True,
        file=sys.stderr,
        disable=not enabled,
        mininterval=0.2,
        dynamic_ncols=True,
        leave=False,
    )


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table (numbers right-aligned), for summaries on stdout."""
    cells = [[str(c) for c in columns]] + [[_fmt(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    numeric = [
        all(isinstance(r[i], int | float) for r in rows) and bool(rows) for i in range(len(columns))
    ]

    def line(r: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if num else c.ljust(w) for c, w, num in zip(r, widths, numeric, strict=True)
        ).rstrip()

    return "\n".join([line(cells[0]), *(line(r) for r in cells[1:])])


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    return "-" if v is None else str(v)
