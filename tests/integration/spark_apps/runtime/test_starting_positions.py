"""A slot started from resolved offsets processes exactly that range of the input: from a timestamp
(resolved through baton.kafka.positions, Tansu's offsets-for-times being wrong) and from explicit
offsets, as a reprocess starts its new generation."""

import json
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from baton.kafka.positions import offsets_for_timestamp
from baton.tools.verify import read_output, verify
from tests.support.slots import start_slot, stop_slot, wait_until_emitted

pytestmark = pytest.mark.integration
BASE = 1_700_000_000_000


@pytest.fixture
def app_with_input(bootstrap, blue_app):
    """An app (blue active) whose input holds 3,000 clicks at 10 ms apart, keyed by user."""
    app, path = blue_app
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(3_000):
        user = f"user{i % 120}"
        p.produce(
            app.input.topic,
            json.dumps({"user_id": user, "timestamp": i}).encode(),
            user.encode(),
            timestamp=BASE + i * 10,
        )
    p.flush()
    return app, path


def truth_from(bootstrap, topic, start, partitions):
    """Clicks per user in the input at or after `start` ({partition: offset})."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.partition.eof": True})
    truth = Counter()
    for p in range(partitions):
        c.assign([TopicPartition(topic, p, start[p])])
        while (m := c.poll(5)) is not None and not m.error():
            truth[json.loads(m.value())["user_id"]] += 1
    c.close()
    return truth


def run_from(bootstrap, app, path, tmp_path, start):
    blue = start_slot(
        bootstrap, path, tmp_path, "blue", starting_offsets=json.dumps({str(p): o for p, o in start.items()})
    )
    try:
        wait_until_emitted(bootstrap, app, 3_000)  # the marker's positions: the input's end
    finally:
        assert stop_slot(blue) == 0
    return read_output(bootstrap, app.output.topic, app.output.partitions)


def test_from_a_timestamp(bootstrap, app_with_input, tmp_path):
    app, path = app_with_input
    start = offsets_for_timestamp(bootstrap, app.input.topic, range(app.input.partitions), BASE + 15_000)
    truth = truth_from(bootstrap, app.input.topic, start, app.input.partitions)
    assert sum(truth.values()) == 1_500  # clicks 1500..2999
    verdict = verify(truth, run_from(bootstrap, app, path, tmp_path, start))
    assert verdict.ok, verdict.summary()


def test_from_explicit_offsets(bootstrap, app_with_input, tmp_path):
    app, path = app_with_input
    start = {0: 700, 1: 200}
    truth = truth_from(bootstrap, app.input.topic, start, app.input.partitions)
    assert 0 < sum(truth.values()) < 3_000
    verdict = verify(truth, run_from(bootstrap, app, path, tmp_path, start))
    assert verdict.ok, verdict.summary()
