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
from typing import Callable, Iterable, Mapping, TypeVar

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


def is_fatal(err) -> bool:
    """Consumer errors that no retry will fix. Transport errors are left to librdkafka's retries."""
    if err.fatal():
        return True
    return err.code() not in (KafkaError._PARTITION_EOF, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                              KafkaError._TIMED_OUT, KafkaError._RESOLVE, KafkaError.NOT_LEADER_FOR_PARTITION,
                              KafkaError.LEADER_NOT_AVAILABLE, KafkaError.REQUEST_TIMED_OUT) and not err.retriable()


def probe_ends(c: Consumer, topic: str, bound: Mapping[int, int], timeout_s: float) -> tuple[dict[int, int], set[int]]:
    """(end per partition, partitions not settled) reading from ListOffsets' lower bound `bound`.

    A partition is settled at EOF, or once records past the bound were read: a fetch delivers whole
    batches, so that covers the batch ListOffsets under-reported (Tansu), and under a steady write load
    EOF may never come (every fetch brings more). An unsettled partition's end is the position reached
    within timeout_s, still a readable end. `c` is assigned for the probe and unassigned after it."""
    reached, eof = dict(bound), {}
    parts = list(bound)

    def settled(p: int) -> bool:
        return p in eof or reached[p] > bound[p]

    c.assign([TopicPartition(topic, p, bound[p]) for p in parts])
    try:
        deadline = time.monotonic() + timeout_s
        while not all(map(settled, parts)) and time.monotonic() < deadline:
            for m in c.consume(100_000, 0.01):
                err, p = m.error(), m.partition()
                if err is None:
                    if m.offset() + 1 > reached[p]:
                        reached[p] = m.offset() + 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    eof.setdefault(p, m.offset())
                elif is_fatal(err):
                    raise KafkaException(err)
        unsettled = {p for p in parts if not settled(p)}
        if unsettled:
            for tp in c.position([TopicPartition(topic, p) for p in unsettled]):
                if tp.offset > reached[tp.partition]:
                    reached[tp.partition] = tp.offset
    finally:
        c.unassign()
    return {p: eof.get(p, reached[p]) for p in parts}, unsettled


def end_offsets(bootstrap: str, topic: str, partitions: Iterable[int], timeout_s: float = 3.0) -> dict[int, int]:
    """The end (next offset) of each partition now, read committed (see probe_ends)."""
    return ends_of(bootstrap, {topic: partitions}, timeout_s)[topic]


def ends_of(bootstrap: str, topics: Mapping[str, Iterable[int]], timeout_s: float = 3.0) -> dict[str, dict[int, int]]:
    """end_offsets of several topics through one consumer (a status read of many apps' inputs)."""
    c = _consumer(bootstrap)
    try:
        out = {}
        for topic, partitions in topics.items():
            bound = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1] for p in partitions}
            out[topic] = probe_ends(c, topic, bound, timeout_s)[0]
        return out
    finally:
        c.close()
