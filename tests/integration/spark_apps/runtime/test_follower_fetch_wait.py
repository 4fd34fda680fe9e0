"""The follower's fetch wait on the real broker: long while nothing waits on what it reads, short from a
fence on, and the consumer it reopens for that reads on from where the old one stood (nothing missed,
nothing read twice)."""

import time

import pytest
from confluent_kafka import Producer

from baton.records import CommitMarker, ControlRecord, Slot
from spark_apps.runtime.coordination.follower import HANDOFF_FETCH_WAIT_MS, IDLE_FETCH_WAIT_MS, Follower

pytestmark = pytest.mark.integration
APP = "fw_app"


def control(revision, fence=None):
    return ControlRecord(app=APP, revision=revision, epoch=1, active=Slot.BLUE, fence=fence)


def marker(batch_id, emitted):
    return CommitMarker(app=APP, generation=0, epoch=1, slot=Slot.BLUE, batch_id=batch_id, emitted=emitted)


def until(check, timeout_s=15.0):
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_fence_shortens_the_wait_and_the_reopened_reader_misses_nothing(bootstrap, topics, tmp_path):
    t = topics(control=1, commits=1)
    producer = Producer({"bootstrap.servers": bootstrap})

    def send(topic, value):
        producer.produce(topic, key=APP.encode(), value=value)
        producer.flush(10)

    send(t["control"], control(1).to_bytes())
    send(t["commits"], marker(1, {0: 10}).to_bytes())
    f = Follower(bootstrap, APP, Slot.GREEN, t["commits"], 1, tmp_path / "cap.json", control_topic=t["control"])
    try:
        f.catch_up()
        assert f.fetch_wait_ms == IDLE_FETCH_WAIT_MS
        f.start()
        send(t["commits"], marker(2, {0: 20}).to_bytes())
        assert until(lambda: f.snapshot()[1].batch_id == 2)
        assert f.fetch_wait_ms == IDLE_FETCH_WAIT_MS

        # A fence, and right behind it markers the reopened consumer must read from where the old one stood.
        send(t["control"], control(2, fence={0: 50}).to_bytes())
        for batch in (3, 4, 5):
            send(t["commits"], marker(batch, {0: 10 * batch}).to_bytes())
        assert until(lambda: f.fetch_wait_ms == HANDOFF_FETCH_WAIT_MS), "the fence did not shorten the wait"
        assert until(lambda: f.snapshot()[1].batch_id == 5)
        assert f.snapshot()[0].fence == {0: 50}
        assert f.last_batch == {0: 10}  # 40 -> 50: each marker taken once, in order

        send(t["control"], control(3).to_bytes())  # the fence lifted: the long wait again
        send(t["commits"], marker(6, {0: 60}).to_bytes())
        assert until(lambda: f.fetch_wait_ms == IDLE_FETCH_WAIT_MS), "lifting the fence kept the short wait"
        assert until(lambda: f.snapshot()[1].batch_id == 6)
        assert f.snapshot()[0].revision == 3
    finally:
        f.stop()
