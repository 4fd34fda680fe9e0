"""The fetch wait a reader lengthens when its fetches come back empty (baton.kafka.fetch_wait)."""

import uuid

from confluent_kafka import KafkaError, KafkaException

from baton.kafka.fetch_wait import (
    FETCH_WAITS_MS,
    StallWatch,
    answered_high,
    fetch_wait_ms,
    lengthen,
    reopen_longer,
    short_wait,
)


def a_topic() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"  # the learned waits are the process's: a topic of the test's own


def test_a_reader_starts_with_its_own_shortest_wait_until_one_needed_longer():
    topic = a_topic()
    assert fetch_wait_ms("b:1", topic, 1) == 1
    assert fetch_wait_ms("b:1", topic, 10) == 10


def test_lengthening_steps_up_and_later_readers_of_the_topic_start_there():
    topic = a_topic()
    assert lengthen("b:1", topic, 1) == 10
    assert fetch_wait_ms("b:1", topic, 1) == 10
    assert lengthen("b:1", topic, 10) == 50
    assert fetch_wait_ms("b:1", topic, 1) == 50
    assert fetch_wait_ms("b:1", topic, 250) == 250  # a reader's own longer wait stays
    # Another topic, another broker: unaffected.
    assert fetch_wait_ms("b:1", a_topic(), 1) == 1
    assert fetch_wait_ms("b:2", topic, 1) == 1


def test_a_reader_with_a_wait_between_steps_goes_to_the_next_longer_one():
    assert lengthen("b:1", a_topic(), 30) == 50


def test_nothing_is_longer_than_the_longest_wait_and_a_shorter_learned_one_never_replaces_it():
    topic = a_topic()
    assert lengthen("b:1", topic, FETCH_WAITS_MS[-1]) is None
    assert lengthen("b:1", topic, 250) == 1000
    assert lengthen("b:1", topic, 1) == 10
    assert fetch_wait_ms("b:1", topic, 1) == 1000


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_watch_reports_a_stall_after_stall_s_short_of_the_end_once_per_stall():
    clock = Clock()
    watch = StallWatch(stall_s=1.0, clock=clock)
    clock.now = 1.0
    assert not watch.stalled()
    clock.now = 1.01
    assert watch.stalled()
    assert not watch.stalled()  # counted afresh: the caller lengthened its wait
    clock.now = 2.02
    assert watch.stalled()


def test_reaching_the_end_restarts_the_watch():
    clock = Clock()
    watch = StallWatch(stall_s=1.0, clock=clock)
    clock.now = 0.9
    watch.reached()
    clock.now = 1.5
    assert not watch.stalled()
    clock.now = 1.91
    assert watch.stalled()


class FakeConsumer:
    """get_watermark_offsets as a consumer answers it: (low, high), or KafkaException when no broker answers."""

    def __init__(self, high: int | None):
        self.high, self.asked = high, []

    def get_watermark_offsets(self, tp, timeout):
        self.asked.append((tp.topic, tp.partition, timeout))
        if self.high is None:
            raise KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN))
        return 0, self.high


def test_a_read_short_of_an_answering_brokers_end_has_a_wait_too_short():
    consumer = FakeConsumer(high=6000)
    assert short_wait(consumer, "t", 0, position=725)
    assert consumer.asked == [("t", 0, 1.0)]


def test_a_read_at_the_end_or_a_broker_that_does_not_answer_is_no_reason_to_wait_longer():
    assert not short_wait(FakeConsumer(high=6000), "t", 0, position=6000)  # e.g. held at an open transaction
    assert not short_wait(FakeConsumer(high=None), "t", 0, position=725)  # paused or unreachable
    assert answered_high(FakeConsumer(high=None), "t") is None
    assert answered_high(FakeConsumer(high=42), "t") == 42


class Closable:
    def __init__(self, wait=None):
        self.wait, self.closed, self.assigned = wait, False, None

    def close(self):
        self.closed = True

    def assign(self, tps):
        self.assigned = tps


def test_a_stalled_consumer_is_replaced_by_one_with_the_next_wait_for_every_topic_it_read():
    topics, old = [a_topic(), a_topic()], Closable()
    fresh, wait = reopen_longer(old, Closable, "b:1", topics, 10, ["tp@7"])
    assert (wait, fresh.wait, fresh.assigned, old.closed) == (50, 50, ["tp@7"], True)
    assert [fetch_wait_ms("b:1", t, 1) for t in topics] == [50, 50]  # the topics' later readers start there


def test_a_consumer_with_the_longest_wait_is_kept():
    old = Closable()
    assert reopen_longer(old, Closable, "b:1", [a_topic()], FETCH_WAITS_MS[-1]) is None
    assert not old.closed
    assert reopen_longer(old, Closable, "b:1", [], 10) is None  # no topic stalled: nothing to lengthen
    assert not old.closed
