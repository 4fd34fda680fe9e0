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
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from baton.kafka.client_config import kafka_config
from baton.kafka.fetch_wait import StallWatch, answered_high, fetch_wait_ms, lengthen, reopen_longer, short_wait
from baton.kafka.messages import offset_of, partition_of, topic_of

T = TypeVar("T")
# consume(n, t) returns after n messages or t seconds, whichever comes first: with n large, t is
# what each read of a small topic to its end costs, so it stays short (the loops end at EOF).
READ_WAIT_S = 0.05
# The fetch that finds the end returns after this wait: EOF in milliseconds (longer where Tansu needs it:
# baton.kafka.fetch_wait).
FETCH_WAIT_MS = 10


def _consumer(bootstrap: str, fetch_wait: int = FETCH_WAIT_MS, **extra) -> Consumer:
    return Consumer(
        kafka_config(
            bootstrap,
            {
                **extra,
                "group.id": f"baton-tail-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": fetch_wait,
            },
        )
    )


def read_tail(
    bootstrap: str,
    topic: str,
    keep: Callable[[Message], T | None],
    last_n: int | None = 2000,
    partition: int = 0,
    timeout_s: float = 15.0,
) -> list[T]:
    """keep(message) for (at least) the last `last_n` records of one partition (None: all), in log order;
    messages for which keep returns None are dropped."""
    wait = fetch_wait_ms(bootstrap, topic, FETCH_WAIT_MS)
    c = _consumer(bootstrap, wait)
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
        position = low if last_n is None else max(low, high - last_n)
        c.assign([TopicPartition(topic, partition, position)])
        out: list[T] = []
        watch = StallWatch()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for m in c.consume(10_000, READ_WAIT_S):
                if err := m.error():
                    if err.code() == KafkaError._PARTITION_EOF:
                        return out
                    raise KafkaException(err)
                position = offset_of(m) + 1
                if (item := keep(m)) is not None:
                    out.append(item)
            if (
                watch.stalled()
                and short_wait(c, topic, partition, position)
                and (
                    reopened := reopen_longer(
                        c,
                        lambda w: _consumer(bootstrap, w),
                        bootstrap,
                        [topic],
                        wait,
                        [TopicPartition(topic, partition, position)],
                    )
                )
            ):
                c, wait = reopened
        raise TimeoutError(
            f"{topic}[{partition}] not read to its end within {timeout_s}s "
            f"(at offset {position}, fetch.wait.max.ms={wait})"
        )
    finally:
        c.close()


def is_fatal(err) -> bool:
    """Consumer errors that no retry will fix. Transport errors are left to librdkafka's retries."""
    if err.fatal():
        return True
    return (
        err.code()
        not in (
            KafkaError._PARTITION_EOF,
            KafkaError._TRANSPORT,
            KafkaError._ALL_BROKERS_DOWN,
            KafkaError._TIMED_OUT,
            KafkaError._RESOLVE,
            KafkaError.NOT_LEADER_FOR_PARTITION,
            KafkaError.LEADER_NOT_AVAILABLE,
            KafkaError.REQUEST_TIMED_OUT,
        )
        and not err.retriable()
    )


def probe_ends(
    c: Consumer,
    topic: str,
    bound: Mapping[int, int],
    timeout_s: float,
    bootstrap: str | None = None,
    fetch_wait: int = FETCH_WAIT_MS,
) -> tuple[dict[int, int], set[int]]:
    """(end per partition, partitions not settled) reading from ListOffsets' lower bound `bound`.

    A partition is settled at EOF, or once records past the bound were read: a fetch delivers whole
    batches, so that covers the batch ListOffsets under-reported (Tansu), and under a steady write load
    EOF may never come (every fetch brings more). An unsettled partition's end is the position reached
    within timeout_s, still a readable end. `c` is assigned for the probe and unassigned after it. With
    `bootstrap` (and `c`'s fetch.wait.max.ms, `fetch_wait`), see probe_many."""
    ends, unsettled = probe_many(c, {(topic, p): b for p, b in bound.items()}, timeout_s, bootstrap, fetch_wait)
    return {p: e for (_, p), e in ends.items()}, {p for _, p in unsettled}


def probe_many(
    c: Consumer,
    bound: Mapping[tuple[str, int], int],
    timeout_s: float,
    bootstrap: str | None = None,
    fetch_wait: int = FETCH_WAIT_MS,
) -> tuple[dict[tuple[str, int], int], set[tuple[str, int]]]:
    """probe_ends of several topics' partitions at once, keyed by (topic, partition): one wait for all.

    With `bootstrap`, a probe not settled within STALL_S while the broker answers has a fetch wait
    (`fetch_wait`, `c`'s) too short for a partition of many batches (Tansu: baton.kafka.fetch_wait; a
    10 ms wait stopped settling between 10,000 and 20,000 batches, about a quarter of an hour of the
    load generator's input): the wait is lengthened for those topics and the probe returns at once
    (unsettled), instead of waiting out timeout_s; the caller's next consumer uses the longer wait."""
    reached, eof = dict(bound), dict[tuple[str, int], int]()
    keys = list(bound)

    def settled(k: tuple[str, int]) -> bool:
        return k in eof or reached[k] > bound[k]

    c.assign([TopicPartition(t, p, bound[(t, p)]) for t, p in keys])
    try:
        watch = StallWatch()
        deadline = time.monotonic() + timeout_s
        while not all(map(settled, keys)) and time.monotonic() < deadline:
            if bootstrap is not None and watch.stalled():
                waiting = [k for k in keys if not settled(k)]
                if answered_high(c, *waiting[0]) is not None:
                    for topic in sorted({t for t, _ in waiting}):
                        lengthen(bootstrap, topic, fetch_wait)
                    break
            for m in c.consume(100_000, 0.01):
                err, k = m.error(), (topic_of(m), partition_of(m))
                if err is None:
                    if offset_of(m) + 1 > reached[k]:
                        reached[k] = offset_of(m) + 1
                elif err.code() == KafkaError._PARTITION_EOF:
                    eof.setdefault(k, offset_of(m))
                elif is_fatal(err):
                    raise KafkaException(err)
        unsettled = {k for k in keys if not settled(k)}
        if unsettled:
            for tp in c.position([TopicPartition(t, p) for t, p in unsettled]):
                k = (tp.topic, tp.partition)
                if tp.offset > reached[k]:
                    reached[k] = tp.offset
    finally:
        c.unassign()
    return {k: eof.get(k, reached[k]) for k in keys}, unsettled


def end_offsets(bootstrap: str, topic: str, partitions: Iterable[int], timeout_s: float = 3.0) -> dict[int, int]:
    """The end (next offset) of each partition now, read committed (see probe_ends)."""
    return ends_of(bootstrap, {topic: partitions}, timeout_s)[topic]


def ends_of(bootstrap: str, topics: Mapping[str, Iterable[int]], timeout_s: float = 3.0) -> dict[str, dict[int, int]]:
    """end_offsets of several topics through one consumer and one probe (a status read of many apps' inputs)."""
    wait = max((fetch_wait_ms(bootstrap, t, FETCH_WAIT_MS) for t in topics), default=FETCH_WAIT_MS)
    c = _consumer(bootstrap, wait)
    try:
        bound = {
            (t, p): c.get_watermark_offsets(TopicPartition(t, p), timeout=timeout_s)[1]
            for t, partitions in topics.items()
            for p in partitions
        }
        ends, _ = probe_many(c, bound, timeout_s, bootstrap, wait)
        out: dict[str, dict[int, int]] = {t: {} for t in topics}
        for (t, p), e in ends.items():
            out[t][p] = e
        return out
    finally:
        c.close()
