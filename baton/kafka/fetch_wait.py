"""How long Baton's readers let the broker hold a fetch: short, lengthened where the broker needs more.

Baton reads its own small topics (control, status, leases, commit markers) with a short fetch wait,
because the fetch that finds a partition's end returns only after that wait: a read to the end costs it.

Tansu 0.6.0 (the embedded broker) answers a fetch with nothing at all, neither records nor the
partition's end, when finding the fetch's offset takes it longer than the fetch's wait, and that grows
with the number of batches in the partition (it never compacts, nor deletes). Measured on this 2-core
machine: a 1 ms wait stopped working at ~1,450 batches, 10 ms between 15,000 and 20,000, 50 ms still
worked at 20,000. Every control write adds two batches (record, commit marker), every lease renewal one.
A reader whose wait is too short for its partition never advances: a control write then timed out after
~700 control writes, a lease read after a few hours of renewals.

Such a reader gets nothing at all, or a record now and then (725 of 20,000 in 15 s at 10 ms). So a read
that has not reached the end it is after within STALL_S (reading a small topic to its end takes
milliseconds) reopens where it stopped with the next wait of FETCH_WAITS_MS, and its process keeps that
wait for the topic; unless the broker does not answer at all (paused, unreachable), which no wait would
help, and a longer one would slow every later read. Apache Kafka answers a fetch with the records it has
at once, whatever the wait.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from confluent_kafka import Consumer

log = logging.getLogger(__name__)

FETCH_WAITS_MS = (1, 10, 50, 250, 1000)
# Far above a fetch's round trip on a busy host (milliseconds), far below the reads' timeouts (15-30 s,
# enough for every step of FETCH_WAITS_MS).
STALL_S = 1.0

# A broker that answers a metadata query (ListOffsets) takes milliseconds.
ANSWER_S = 1.0

_learned: dict[tuple[str, str], int] = {}
_learned_lock = threading.Lock()


def fetch_wait_ms(bootstrap: str, topic: str, shortest_ms: int) -> int:
    """The wait a new reader of `topic` uses: `shortest_ms`, or longer if a reader in this process needed it."""
    with _learned_lock:
        return max(shortest_ms, _learned.get((bootstrap, topic), 0))


def lengthen(bootstrap: str, topic: str, current_ms: int) -> int | None:
    """The next longer wait after a reader with `current_ms` stalled (kept for the topic's later readers in
    this process); None when it already had the longest."""
    longer = next((w for w in FETCH_WAITS_MS if w > current_ms), None)
    if longer is None:
        return None
    with _learned_lock:
        _learned[(bootstrap, topic)] = max(_learned.get((bootstrap, topic), 0), longer)
    log.warning(
        "%s: not read to its end within %.0f s at fetch.wait.max.ms=%d: reading on with %d ms (Tansu "
        "answers a fetch whose wait is too short for a partition of many batches with (nearly) nothing)",
        topic,
        STALL_S,
        current_ms,
        longer,
    )
    return longer


def reopen_longer(
    consumer,
    make: Callable[[int], Consumer],
    bootstrap: str,
    topics: Iterable[str],
    current_ms: int,
    assignment: list | None = None,
):
    """(a consumer with the next longer wait, that wait) in place of `consumer`, whose reads of `topics` stalled
    at `current_ms` (the wait is learned for those topics in this process: lengthen); `make(wait)` builds the
    new consumer, assigned to `assignment` (TopicPartitions at the positions to read on from) if given, and
    `consumer` is closed. None, with `consumer` kept, when its wait was already the longest."""
    longer = max((w for t in topics if (w := lengthen(bootstrap, t, current_ms)) is not None), default=None)
    if longer is None:
        return None
    consumer.close()  # its fetches come back (nearly) empty: on from where it stopped, waiting longer
    fresh = make(longer)
    if assignment:
        fresh.assign(assignment)
    return fresh, longer


def answered_high(consumer, topic: str, partition: int = 0) -> int | None:
    """The partition's high watermark, if the broker answers within ANSWER_S; None if it does not."""
    from confluent_kafka import KafkaException, TopicPartition

    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=ANSWER_S)[1]
    except KafkaException:
        return None


def short_wait(consumer, topic: str, partition: int, position: int) -> bool:
    """A read stalled at `position` has a fetch wait too short for the partition: the broker answers and
    has records from there on."""
    high = answered_high(consumer, topic, partition)
    return high is not None and position < high


class StallWatch:
    """How long a read has been short of the end it is after."""

    def __init__(self, stall_s: float = STALL_S, clock: Callable[[], float] = time.monotonic):
        self.stall_s, self._clock = stall_s, clock
        self._since = clock()

    def reached(self) -> None:
        """The read reached its end: a new one starts now."""
        self._since = self._clock()

    def stalled(self) -> bool:
        """stall_s passed since the read started (or the last stall): then the watch starts again, so the
        caller lengthens its wait once per stall_s."""
        if self._clock() - self._since <= self.stall_s:
            return False
        self._since = self._clock()
        return True
