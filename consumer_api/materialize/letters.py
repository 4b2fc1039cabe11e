"""The read API's dead letters, which never hold up the read path.

The materializer commits no offset (every start reads the predictions topic from the
beginning), so there is nothing to confirm before it goes on: letters go out within the letters
producer's linger (LETTERS_LINGER_MS), the materializer serves the delivery reports of queued
ones after each batch without waiting, and one that fails is counted
(precast_producer_delivery_failures_total) and logged here at most once a LETTER_LOG_EVERY_S.
A blocking flush once a second used to stall the view for as long as the broker took to take
letters (a fresh broker's producer ID, a restart).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from precast.kafka import Producer
from precast.settings import KafkaSettings

log = logging.getLogger("precast.api.materializer")

LETTERS_LINGER_MS = 100
LETTER_LOG_EVERY_S = 60.0


def letters_producer(kafka: KafkaSettings) -> Producer:
    conf: dict[str, Any] = {
        "linger.ms": LETTERS_LINGER_MS,  # never waited for: batch them
        # Only failures are of use here (UndeliveredLetters): a report per delivered letter was
        # a Python callback per poison record on the materializer's thread, for nothing.
        "delivery.report.only.error": True,
    }
    return Producer(kafka, on_delivery_error=UndeliveredLetters(), **conf)


class UndeliveredLetters:
    """The letters producer's delivery-error callback (served inside `poll`, on the
    materializer's thread): one log line a LETTER_LOG_EVERY_S, with how many failed since the
    last (each is also counted by the producer)."""

    def __init__(self, every_s: float = LETTER_LOG_EVERY_S) -> None:
        self._every, self._failed, self._logged_at = every_s, 0, -every_s

    def __call__(self, failure: Exception) -> None:
        self._failed += 1
        mono = time.monotonic()
        if mono - self._logged_at >= self._every:
            log.warning(
                "%d dead letter(s) not delivered (their records stay at their offsets); last: %s",
                self._failed,
                failure,
            )
            self._failed, self._logged_at = 0, mono
