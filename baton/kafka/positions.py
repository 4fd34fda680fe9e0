"""Where to start reading: a timestamp to offsets, and the partition bounds a request is checked against.

A timestamp resolves through the broker (offsets_for_times) when it answers right, and by a binary
search over the records' timestamps when it does not: Tansu 0.6.0 answers 0 for every timestamp.
The broker's answer is verified (the record there is at or after the timestamp, the one before it is
earlier), so a wrong answer from any broker falls back instead of silently replaying the wrong range.
Timestamps are assumed not to decrease within a partition (producer time, the usual case).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from baton.kafka.messages import offset_of
from baton.kafka.tail import _consumer, end_offsets, is_fatal

# (offset, timestamp ms) of the first record at or after an offset and below the end, or None.
FirstRecord = Callable[[int], "tuple[int, int] | None"]


def search_timestamp(first_record: FirstRecord, ts_ms: int, low: int, end: int) -> int:
    """Smallest offset o in [low, end] such that every record at >= o has timestamp >= ts_ms:
    binary search, one record read per step."""
    lo, hi = low, end
    while lo < hi:
        mid = (lo + hi) // 2
        rec = first_record(mid)
        if rec is None or rec[1] >= ts_ms:
            hi = mid
        else:
            lo = rec[0] + 1
    return lo


def first_record(
    c: Consumer, topic: str, partition: int, offset: int, end: int, timeout_s: float = 10.0
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first committed record at >= offset and < end; None if there is none
    (aborted transactions and control records leave gaps)."""
    if offset >= end:
        return None
    tp = TopicPartition(topic, partition, offset)
    c.assign([tp])
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for m in c.consume(1, 0.05):
                err = m.error()
                if err is None:
                    return (offset_of(m), m.timestamp()[1]) if offset_of(m) < end else None
                if err.code() == KafkaError._PARTITION_EOF:
                    if offset_of(m) >= end:
                        return None
                elif is_fatal(err):
                    raise KafkaException(err)
            if c.position([tp])[0].offset >= end:
                return None
        raise TimeoutError(f"{topic}[{partition}]: no record between {offset} and {end} within {timeout_s:.0f}s")
    finally:
        c.unassign()


def bounds(bootstrap: str, topic: str, partitions: Iterable[int]) -> tuple[dict[int, int], dict[int, int]]:
    """(low, end) per partition: the first offset still in the log and the true end (tail.end_offsets)."""
    parts = list(partitions)
    c = _consumer(bootstrap)
    try:
        lows = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[0] for p in parts}
    finally:
        c.close()
    return lows, end_offsets(bootstrap, topic, parts)


def offsets_for_timestamp(bootstrap: str, topic: str, partitions: Iterable[int], ts_ms: int) -> dict[int, int]:
    """Per partition, the first offset whose record is at or after ts_ms (the end if none is)."""
    parts = list(partitions)
    lows, ends = bounds(bootstrap, topic, parts)
    c = _consumer(bootstrap)
    try:
        try:
            asked = {
                tp.partition: tp.offset
                for tp in c.offsets_for_times([TopicPartition(topic, p, ts_ms) for p in parts], timeout=10)
            }
        except KafkaException:
            asked = {}
        out = {}
        for p in parts:

            def at(o: int, p: int = p) -> tuple[int, int] | None:
                return first_record(c, topic, p, o, ends[p])

            answer = asked.get(p, -1)
            answer = ends[p] if answer == -1 else answer  # -1: no record at or after ts_ms
            out[p] = (
                answer if _right(at, answer, ts_ms, lows[p], ends[p]) else search_timestamp(at, ts_ms, lows[p], ends[p])
            )
        return out
    finally:
        c.close()


def _right(at: FirstRecord, offset: int, ts_ms: int, low: int, end: int) -> bool:
    """The broker's answer is the first record at or after ts_ms: it is at/after, and the record before
    it (if any) is earlier."""
    if not low <= offset <= end:
        return False
    here = at(offset)
    if here is not None and here[1] < ts_ms:
        return False
    if offset == low:
        return True
    before = at(max(low, offset - 1))
    return before is None or before[0] >= offset or before[1] < ts_ms
