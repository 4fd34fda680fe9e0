"""Idempotent topic administration shared by the local platform, the Airflow hooks and tests."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from baton.kafka.client_config import kafka_config


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int = 1
    config: dict[str, str] = field(default_factory=dict)


REPLICATION_FACTOR_ENV = "BATON_KAFKA_REPLICATION_FACTOR"


def replication_factor(environ=None) -> int:
    """The replication factor of the topics Baton creates: BATON_KAFKA_REPLICATION_FACTOR (-1: the
    cluster's default.replication.factor), else 1 (the embedded broker, a one-node cluster)."""
    raw = (os.environ if environ is None else environ).get(REPLICATION_FACTOR_ENV, "").strip()
    if not raw:
        return 1
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value == 0 or value < -1:
        raise ValueError(
            f"{REPLICATION_FACTOR_ENV}={raw!r} must be a positive integer, or -1 for the cluster's default"
        )
    return value


class TopicMismatch(RuntimeError):
    """A topic exists with a different partition count than its spec asks for."""


def unique_specs(specs: Iterable[TopicSpec]) -> list[TopicSpec]:
    """Each topic once (apps may share an input topic; a broker may answer a repeated name twice,
    which librdkafka cannot parse). Two different specs for one name are an error naming both."""
    seen: dict[str, TopicSpec] = {}
    for s in specs:
        if s.name in seen and seen[s.name] != s:
            raise TopicMismatch(f"topic {s.name!r} is asked for twice, differently: {seen[s.name]} and {s}")
        seen.setdefault(s.name, s)
    return list(seen.values())


def ensure_topics(bootstrap: str, specs: Iterable[TopicSpec], timeout_s: float = 15.0) -> list[str]:
    """Create the topics that are missing; "already exists" is success. Returns the names created.
    New topics get replication_factor() replicas.

    An existing topic with fewer or more partitions than asked is an error, not a silent pass:
    offsets vectors and fences are per partition.
    """
    specs = unique_specs(specs)
    replicas = replication_factor()
    admin = AdminClient(kafka_config(bootstrap))
    created: list[str] = []
    futures = admin.create_topics(
        [NewTopic(s.name, s.partitions, replicas, config=dict(s.config)) for s in specs],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    for name, fut in futures.items():
        try:
            fut.result()
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    have = listed_partitions(admin, [s.name for s in specs], timeout_s)
    for s in specs:
        if have[s.name] != s.partitions:
            raise TopicMismatch(f"topic {s.name!r} has {have[s.name]} partitions, expected {s.partitions}")
    return created


def listed_partitions(admin, names: list[str], timeout_s: float, every_s: float = 0.2) -> dict[str, int]:
    """Each topic's partition count in the cluster's metadata. Apache Kafka propagates a new topic's
    metadata asynchronously: for a moment it is missing or listed with 0 partitions. Those are asked
    again until they have some, up to timeout_s (a topic that truly has none is not a Kafka topic)."""
    deadline = time.monotonic() + timeout_s
    while True:
        existing = admin.list_topics(timeout=timeout_s).topics
        have = {n: len(existing[n].partitions) if n in existing else 0 for n in names}
        if all(have.values()) or time.monotonic() > deadline:
            return have
        time.sleep(every_s)


def delete_topics(bootstrap: str, names: Iterable[str], timeout_s: float = 15.0) -> None:
    """Delete topics; a topic that does not exist is already deleted. Each name once: a broker may answer
    a repeated name twice, which librdkafka cannot parse (as in unique_specs)."""
    names = list(dict.fromkeys(names))
    if not names:
        return
    admin = AdminClient(kafka_config(bootstrap))
    for _, fut in admin.delete_topics(names, operation_timeout=timeout_s).items():
        try:
            fut.result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
