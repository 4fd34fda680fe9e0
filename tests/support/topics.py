"""Topic helpers for tests that make a slot's input lose its data."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient

from baton.kafka.admin import TopicSpec, delete_topics, ensure_topics


def recreate_topic(bootstrap: str, spec: TopicSpec, timeout_s: float = 30.0) -> None:
    """Delete `spec`'s topic and create it again, empty (Apache Kafka deletes asynchronously: wait until it
    is gone, then until the new one has a leader for every partition)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    delete_topics(bootstrap, [spec.name])
    deadline = time.monotonic() + timeout_s
    while spec.name in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"topic {spec.name} not deleted within {timeout_s}s"
        time.sleep(0.2)
    ensure_topics(bootstrap, [spec])
    while True:
        t = admin.list_topics(spec.name, timeout=10).topics.get(spec.name)
        if (
            t is not None
            and t.error is None
            and len(t.partitions) == spec.partitions
            and all(p.leader >= 0 for p in t.partitions.values())
        ):
            return
        assert time.monotonic() < deadline, f"topic {spec.name} not back within {timeout_s}s"
        time.sleep(0.2)
