"""Timestamps resolve to offsets on the real broker: Tansu answers offsets-for-times with 0, which is
detected as wrong and replaced by a search over the records' timestamps."""

import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from baton.kafka.positions import bounds, offsets_for_timestamp

pytestmark = pytest.mark.integration
BASE = 1_700_000_000_000


def test_a_timestamp_resolves_to_the_first_record_at_or_after_it(bootstrap, topics):
    topic = topics(events=2)["events"]
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(100):
        for part in (0, 1):
            p.produce(topic, json.dumps({"i": i}).encode(), partition=part, timestamp=BASE + i * 1_000 + part)
    p.flush()
    assert bounds(bootstrap, topic, [0, 1]) == ({0: 0, 1: 0}, {0: 100, 1: 100})
    # Tansu's own answer is wrong (0 for any timestamp): the result must not depend on it.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t"})
    broker = [tp.offset for tp in c.offsets_for_times([TopicPartition(topic, 0, BASE + 40_500)], timeout=10)]
    c.close()
    assert offsets_for_timestamp(bootstrap, topic, [0, 1], BASE + 40_500) == {0: 41, 1: 41}, f"broker said {broker}"
    assert offsets_for_timestamp(bootstrap, topic, [0, 1], BASE + 40_001) == {0: 41, 1: 40}  # p1 is 1 ms later
    assert offsets_for_timestamp(bootstrap, topic, [0, 1], BASE - 5) == {0: 0, 1: 0}
    assert offsets_for_timestamp(bootstrap, topic, [0, 1], BASE + 10**9) == {0: 100, 1: 100}
