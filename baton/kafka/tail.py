"""Reading the tail of a partition to its true end: the one way Baton reads its own small topics
(control, status, commits) and finds where a partition ends.

The end is found by consuming to partition EOF (the high watermark in Fetch responses), never from
ListOffsets alone: Tansu 0.6.0 reports ListOffsets' high watermark as the last batch's base + 1, which
is only a lower bound. So a tail read starts `last_n` records before that lower bound (reading a bit
more than asked, never less) and stops at EOF.
"""

from __future__ import annotations

import time
import uuid
from typing import Callable, Iterable, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

T = TypeVar("T")
# consume(n, t) returns after n messages or t seconds, whichever comes first: with n large, t is
# what each read of a small topic to its end costs, so it stays short (the loops end at EOF).
READ_WAIT_S = 0.05


def _consumer(bootstrap: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"baton-tail-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "isolation.level": "read_committed", "enable.partition.eof": True,
        "fetch.wait.max.ms": 10,  # an empty fetch at the end is answered at once: EOF in milliseconds
    })


def read_tail(bootstrap: str, topic: str, keep: Callable[[Message], T | None], last_n: int | None = 2000,
              partition: int = 0, timeout_s: float = 15.0) -> list[T]:
    """keep(message) for (at least) the last `last_n` records of one partition (None: all), in log order;
    messages for which keep returns None are dropped."""
    c = _consumer(bootstrap)
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
        start = low if last_n is None else max(low, high - last_n)
        c.assign([TopicPartition(topic, partition, start)])
        out: list[T] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for m in c.consume(10_000, READ_WAIT_S):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        return out
                    raise KafkaException(m.error())
                if (item := keep(m)) is not None:
                    out.append(item)
        raise TimeoutError(f"{topic}[{partition}] not read to its end within {timeout_s}s")
    finally:
        c.close()


def end_offsets(bootstrap: str, topic: str, partitions: Iterable[int], timeout_s: float = 3.0) -> dict[int, int]:
    """The end (next offset) of each partition, read committed (the last stable offset).

    Exact for a partition that reaches EOF within timeout_s. A partition written to without pause may
    never report EOF (each fetch brings new records): its end is then the furthest offset read, a
    lower bound that is at most timeout_s old, which is what "the end now" can mean for it."""
    c = _consumer(bootstrap)
    ends: dict[int, int] = {}
    try:
        parts = list(partitions)
        starts = {}
        for p in parts:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            starts[p] = ends[p] = high
        # Records at or past ListOffsets' lower bound move the end forward; EOF confirms it.
        c.assign([TopicPartition(topic, p, starts[p]) for p in parts])
        pending = set(parts)
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                break
            for m in c.consume(10_000, READ_WAIT_S):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        ends[m.partition()] = max(ends[m.partition()], m.offset())
                        pending.discard(m.partition())
                        continue
                    raise KafkaException(m.error())
                ends[m.partition()] = max(ends[m.partition()], m.offset() + 1)
        return ends
    finally:
        c.close()
