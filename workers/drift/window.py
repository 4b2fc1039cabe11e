"""A sliding window of feature rows keyed by time: chunks are appended as batches arrive and
dropped once they are older than the window, so memory stays bounded by rate x window."""

from __future__ import annotations

from collections import deque

import numpy as np


class SlidingWindow:
    def __init__(self, width_s: float, max_rows: int) -> None:
        self.width_s, self.max_rows = width_s, max_rows
        self._chunks: deque[tuple[np.ndarray, np.ndarray]] = deque()  # (times, rows)
        self._rows = 0
        self.newest = float("-inf")

    def __len__(self) -> int:
        return self._rows

    def add(self, times: np.ndarray, rows: np.ndarray) -> None:
        if len(rows) == 0:
            return
        self._chunks.append((np.asarray(times, dtype=np.float64), rows))
        self._rows += len(rows)
        self.newest = max(self.newest, float(np.max(times)))
        self._expire()

    def _expire(self) -> None:
        start = self.newest - self.width_s
        # Whole chunks out of the window, or beyond the row cap (oldest first).
        while self._chunks and (
            self._chunks[0][0].max() < start
            or self._rows - len(self._chunks[0][1]) >= self.max_rows
        ):
            self._rows -= len(self._chunks.popleft()[1])

    def rows(self) -> np.ndarray:
        """Rows whose time lies in (newest - width, newest], at most max_rows (the newest)."""
        if not self._chunks:
            return np.zeros((0, 0))
        start = self.newest - self.width_s
        times = np.concatenate([t for t, _ in self._chunks])
        rows = np.concatenate([r for _, r in self._chunks])
        rows = rows[times > start]
        return rows[-self.max_rows :]
