"""The input's end a slot's status records carry: the true end (Tansu's ListOffsets is only a lower
bound), read in the background, and the thread stops when asked."""

import time

import pytest
from confluent_kafka import Producer

from spark_apps.runtime.source.input_ends import InputEnds

pytestmark = pytest.mark.integration


def test_the_end_is_the_true_end_per_partition_and_follows_new_records(bootstrap, topics):
    topic = topics(input=2)["input"]
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i in range(300):  # in one batch per partition: Tansu's high watermark says 1 of each
        p.produce(topic, b"x", partition=i % 2)
    p.flush(10)
    ends = InputEnds(bootstrap, topic, 2, interval_s=0.2)
    assert ends.latest() is None  # nothing read yet: no end rather than a wrong one
    ends.start()
    try:
        deadline = time.monotonic() + 30
        while ends.latest() != {0: 150, 1: 150}:
            assert time.monotonic() < deadline, f"end read {ends.latest()}, not {{0: 150, 1: 150}}"
            time.sleep(0.1)
        p.produce(topic, b"y", partition=1)
        p.flush(10)
        while ends.latest() != {0: 150, 1: 151}:
            assert time.monotonic() < deadline, f"end read {ends.latest()} after one more record"
            time.sleep(0.1)
    finally:
        ends.stop()
        ends.join(10)
    assert not ends.is_alive()
