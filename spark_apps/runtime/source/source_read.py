"""The executors' read loop of Baton's Kafka source: one partition's offsets [start, end).

Executors (`read`): a fresh consumer per task, assigned (topic, partition, start), read_committed;
it stops when the next offset reaches `end`, not after a count, because transaction markers and
aborted records use offsets but are never delivered. Rows are returned as Arrow record batches
built column-wise (no per-row Python call beyond librdkafka's accessors).
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import cast

from baton.kafka.messages import offset_of
from baton.kafka.tail import is_fatal as _fatal
from spark_apps.runtime.source.input_check import FAIL, WAY_OUT, InputDataLoss
from spark_apps.runtime.source.prefetch import OUT_OF_RANGE

log = logging.getLogger(__name__)

# Executor read tuning. CHUNK bounds one consume() call and one Arrow batch. TAIL_WAIT_S bounds
# a consume() that cannot fill up: consume(n) returns early only once n messages (or events)
# are queued, and a range ending in transaction markers holds fewer than n messages.
CHUNK = 10_000
TAIL_WAIT_S = 0.05
METADATA_TIMEOUT_S = 15.0


def read_range(
    c, topic: str, p: int, start: int, end: int, timeout_s: float, on_data_loss: str = FAIL
) -> Iterator[tuple[list, list[int]]]:
    """The records of `topic`[p] in [start, end) as (messages, offsets) chunks of at most CHUNK, read
    by the assigned consumer `c`. Stops when the next offset reaches `end`, not after a count:
    transaction markers and aborted records use offsets but are never delivered. A position the broker
    says is not in the log (retention or a recreated topic under the query) is InputDataLoss, or under
    policy earliest: past retention the range reads on from the earliest offset, beyond the end it ends."""
    from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

    tp = TopicPartition(topic, p, start)
    c.assign([tp])
    consume, position = c.consume, c.position
    # A consumed message has its offset (baton.kafka.messages); typed so once, not checked per record.
    m_offset, m_err = cast("Callable[[Message], int]", Message.offset), Message.error
    EOF = KafkaError._PARTITION_EOF
    nxt = start
    progress_at = time.monotonic()
    while nxt < end:
        want = end - nxt
        if want > CHUNK:
            want = CHUNK
        msgs = consume(want, TAIL_WAIT_S)
        got = len(msgs)
        done = False
        if got:
            if any(map(m_err, msgs)):
                data = []
                for m in msgs:
                    err = m.error()
                    if err is None:
                        data.append(m)
                    elif err.code() == EOF:
                        if offset_of(m) >= end:
                            done = True
                    elif err.code() in OUT_OF_RANGE:
                        low, high = c.get_watermark_offsets(
                            TopicPartition(topic, p), timeout=METADATA_TIMEOUT_S, cached=False
                        )
                        what = describe_out_of_range(topic, p, offset_of(m), start, end, low, high)
                        if on_data_loss == FAIL:
                            raise InputDataLoss(f"{what} {WAY_OUT}.")
                        log.warning("baton-kafka: on_data_loss=earliest: %s What is not in the log is skipped.", what)
                        if offset_of(m) >= low or low >= end:  # beyond the end, or all of the range removed
                            done = True
                        else:  # past retention: read on from the earliest offset
                            c.assign([TopicPartition(topic, p, low)])
                            nxt, progress_at = low, time.monotonic()
                    elif _fatal(err):
                        raise KafkaException(err)
                msgs = data
            if msgs:
                offs = list(map(m_offset, msgs))
                if offs[-1] >= end:
                    k = bisect_left(offs, end)
                    msgs, offs, done = msgs[:k], offs[:k], True
            if msgs:
                nxt = offs[-1] + 1
                yield msgs, offs
                progress_at = time.monotonic()
        if done:
            break
        if got < want:
            # Short: caught up with the fetcher, or only markers/aborted records remain before
            # `end`. The position moves past transaction markers.
            pos = position([tp])[0].offset
            if pos > nxt:
                nxt = pos
                progress_at = time.monotonic()
            elif time.monotonic() - progress_at > timeout_s:
                raise TimeoutError(f"{topic}[{p}]: no progress at offset {nxt} (reading to {end}) for {timeout_s:.0f}s")


def describe_out_of_range(topic: str, p: int, offset: int, start: int, end: int, low: int, high: int) -> str:
    """One line for a read that met a position the broker does not hold (ListOffsets' figures: on Tansu
    the end is a lower bound)."""
    return (
        f"input data loss on topic {topic!r}, partition {p}: offset {offset} is not in the log (the broker holds "
        f"[{low}, {high})) while reading [{start}, {end}): the topic was recreated or truncated, or retention "
        f"removed records before they were read."
    )
