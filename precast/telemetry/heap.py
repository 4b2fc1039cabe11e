"""What a process's heap holds, for its /metrics: Python's allocated blocks and glibc malloc's
bytes in use and free. RSS alone cannot tell a structure that grows from freed memory that
malloc keeps (or from librdkafka's buffers): a soak that saw a replica's RSS grow needs these to
say which (docs/workers.md, "Memory"). Read on each scrape; mallinfo2 walks every arena's bins,
a few microseconds."""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

__all__ = ["HeapCollector", "malloc_bytes", "register_heap_metrics"]


class _MallInfo2(ctypes.Structure):  # glibc >= 2.33, malloc.h
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _mallinfo2() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):  # not glibc, or older than 2.33
        return None
    fn.restype = _MallInfo2
    return fn


_MALLINFO2 = _mallinfo2()


def malloc_bytes() -> tuple[int, int] | None:
    """(bytes in use, bytes free but kept) of glibc malloc over all arenas; None elsewhere."""
    if _MALLINFO2 is None:
        return None
    m = _MALLINFO2()
    return int(m.uordblks + m.hblkhd), int(m.fordblks)


class HeapCollector:
    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "precast_python_heap_blocks",
            "Memory blocks Python's allocator holds for live objects (sys.getallocatedblocks)",
            value=sys.getallocatedblocks(),
        )
        got = malloc_bytes()
        if got is not None:
            g = GaugeMetricFamily(
                "precast_malloc_bytes",
                "glibc malloc over all arenas: bytes in use (mmapped included) and free but "
                "kept in the process",
                labels=["state"],
            )
            g.add_metric(["in_use"], got[0])
            g.add_metric(["free"], got[1])
            yield g


def register_heap_metrics(registry: CollectorRegistry = REGISTRY) -> None:
    registry.register(HeapCollector())
