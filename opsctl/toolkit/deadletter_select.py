"""Which dead letters an SRE command works on: filters by reason, component, source topic and
device, over a time or offset range of the dead-letter topic (shared by list, export and redrive)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass

from opsctl.settings import StackCliSettings
from opsctl.toolkit.filters import split_list
from opsctl.toolkit.ranges import OffsetRange, range_inputs
from opsctl.toolkit.reader import RangeReader, range_consumer, resolve
from opsctl.toolkit.write_guard import partitions_of
from precast.deadletter import dead_letter_info, original_key
from precast.errors import ConfigError
from precast.kafka import Admin, KafkaMessage
from precast.telemetry.progress import bar
from schemas import deadletters as dl


@dataclass(frozen=True)
class DeadLetterFilter:
    reasons: frozenset[str] = frozenset()
    components: frozenset[str] = frozenset()
    source_topics: frozenset[str] = frozenset()
    devices: frozenset[bytes] = frozenset()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DeadLetterFilter:
        reasons = split_list(args.reason)
        known = {r.value for r in dl.Reason}
        unknown = [r for r in reasons if r not in known]
        if unknown:
            raise ConfigError(
                f"unknown dead-letter reason {unknown[0]!r}: known are {', '.join(sorted(known))}"
            )
        return cls(
            frozenset(reasons),
            frozenset(split_list(args.component)),
            frozenset(split_list(args.source_topic)),
            frozenset(d.encode() for d in split_list(args.device)),
        )

    def matches(
        self, key: bytes | None, info: dict[str, str], headers: list[tuple[str, bytes]] | None
    ) -> bool:
        if self.reasons and info.get("reason") not in self.reasons:
            return False
        if self.components and info.get("component") not in self.components:
            return False
        if self.source_topics and info.get("source.topic") not in self.source_topics:
            return False
        return not self.devices or original_key(key, headers) in self.devices

    def describe(self) -> dict[str, list[str]]:
        return {
            "reasons": sorted(self.reasons),
            "components": sorted(self.components),
            "source_topics": sorted(self.source_topics),
            "devices": sorted(d.decode() for d in self.devices),
        }


def dead_letter_topic(args: argparse.Namespace, settings: StackCliSettings) -> tuple[str, int]:
    topic = args.topic or settings.topics.catalog().dead_letters.name
    admin = Admin(settings.kafka)
    admin.wait_reachable()
    return topic, partitions_of(admin, topic, settings.kafka.bootstrap_servers)


def selected(
    args: argparse.Namespace,
    settings: StackCliSettings,
    label: str,
    flt: DeadLetterFilter | None = None,
) -> Iterator[tuple[KafkaMessage, dict[str, str]]]:
    """The dead letters in the chosen range that pass the filters, with their `dlq.*` info."""
    flt = flt or DeadLetterFilter.from_args(args)
    tr, spec = range_inputs(args, default_all=True)
    topic, parts = dead_letter_topic(args, settings)
    ranges = resolve(settings.kafka, topic, parts, tr, spec)
    yield from read_matching(
        settings, topic, ranges, flt, label, not getattr(args, "no_progress", False)
    )


def read_matching(
    settings: StackCliSettings,
    topic: str,
    ranges: list[OffsetRange],
    flt: DeadLetterFilter,
    label: str,
    progress: bool,
) -> Iterator[tuple[KafkaMessage, dict[str, str]]]:
    c = range_consumer(settings.kafka, f"deadletters-{label}")
    pb = bar(sum(r.size for r in ranges), label, enabled=progress)
    try:
        for msgs in RangeReader(c, topic, ranges):
            for m in msgs:
                headers = m.headers()
                info = dead_letter_info(headers)
                if flt.matches(m.key(), info, headers):
                    yield m, info
            pb.update(len(msgs))
    finally:
        pb.close()
        c.close()
