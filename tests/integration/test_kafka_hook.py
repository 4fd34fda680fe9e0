"""The Kafka hook against the real broker: idempotent topics, positions, a consumer group's offsets
and lag."""

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from baton.kafka.admin import TopicSpec, delete_topics
from baton_airflow.hooks.kafka import BatonKafkaHook

pytestmark = pytest.mark.integration


def test_topics_positions_group_offsets_and_lag(bootstrap):
    hook = BatonKafkaHook(bootstrap_servers=bootstrap)
    topic, group = f"hook-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    assert hook.ensure_topics([TopicSpec(topic, 2)]) == [topic]
    assert hook.ensure_topics([TopicSpec(topic, 2)]) == []  # idempotent
    try:
        p = Producer({"bootstrap.servers": bootstrap})
        for i in range(30):
            p.produce(topic, b"x", partition=i % 2)
        p.flush()
        assert hook.positions(topic, [0, 1]) == {0: 15, 1: 15}
        assert hook.group_offsets(group, topic, [0, 1]) == {}
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
        c.close()
        assert hook.group_offsets(group, topic, [0, 1]) == {0: 10}
        assert hook.group_lag(group, topic, [0, 1]) == {0: 5, 1: 15}
    finally:
        delete_topics(bootstrap, [topic])


def test_the_connection_test_reaches_the_cluster_or_says_why(bootstrap):
    ok, message = BatonKafkaHook(bootstrap_servers=bootstrap).test_connection()
    assert ok and message.startswith(f"{bootstrap}: 1 broker(s),"), message
    ok, message = BatonKafkaHook(bootstrap_servers="127.0.0.1:1").test_connection()
    assert not ok and "KafkaException" in message, message
