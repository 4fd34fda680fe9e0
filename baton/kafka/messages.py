"""A consumed message's topic and position, typed as they are.

confluent_kafka types Message.topic(), partition() and offset() as Optional: a Message can also be
built by hand or be a producer's delivery report. A message a Consumer returned always has them (an
error event such as the end of a partition included); these say so once, for the type checker, and
fail loudly should one ever be missing."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importing this module does not import confluent_kafka
    from confluent_kafka import Message


def topic_of(m: Message) -> str:
    topic = m.topic()
    if topic is None:
        raise ValueError("a message without a topic: not one a consumer returned")
    return topic


def partition_of(m: Message) -> int:
    partition = m.partition()
    if partition is None:
        raise ValueError("a message without a partition: not one a consumer returned")
    return partition


def offset_of(m: Message) -> int:
    offset = m.offset()
    if offset is None:
        raise ValueError("a message without an offset: not one a consumer returned")
    return offset
