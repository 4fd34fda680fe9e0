"""Invariants 1 and 3 at the sink, against the real broker: a fenced former writer cannot make
anything visible; a replayed batch is not emitted twice; output and marker are atomic."""

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from baton.kafka.markers import read_last_marker
from baton.records import Slot
from spark_apps.runtime.sink.kafka_sink import ReplayConflict, TransactionalEmitter, WriterFenced

pytestmark = pytest.mark.integration


def read_all(bootstrap, topic, partitions=1):
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, eof = [], 0
    while eof < partitions:
        for m in c.consume(1000, 1.0):
            if m.error():
                eof += m.error().code() == KafkaError._PARTITION_EOF
                continue
            out.append((m.key(), m.value()))
    c.close()
    return out


@pytest.fixture
def app(topics):
    names = topics(out=1, dead=1, commits=1)
    return names, f"sink_{uuid.uuid4().hex[:6]}"


def make(bootstrap, names, app_name, slot):
    return TransactionalEmitter(bootstrap, app_name, slot, 0, names["out"], names["dead"], names["commits"])


def test_fenced_former_active_cannot_write(bootstrap, app):
    names, app_name = app
    old = make(bootstrap, names, app_name, Slot.BLUE)
    old.acquire(epoch=1)
    assert not old.emit(0, {}, {0: 10}, [(b"k", b"old-1")]).skipped

    new = make(bootstrap, names, app_name, Slot.GREEN)
    new.acquire(epoch=2)  # takes the writer role: Kafka fences `old`
    assert new.last is not None and new.last.emitted == {0: 10}

    with pytest.raises(WriterFenced):
        old.emit(1, {0: 10}, {0: 20}, [(b"k", b"zombie")])
    assert not old.holding
    new.emit(1, {0: 10}, {0: 20}, [(b"k", b"new-1")])

    values = [v for _, v in read_all(bootstrap, names["out"])]
    assert values == [b"old-1", b"new-1"]
    assert read_last_marker(bootstrap, names["commits"], app_name).epoch == 2


def test_replayed_batch_is_not_emitted_twice(bootstrap, app):
    names, app_name = app
    e = make(bootstrap, names, app_name, Slot.BLUE)
    e.acquire(epoch=1)
    e.emit(0, {}, {0: 5}, [(b"a", b"1")], dead_letters=[(b"x", b"bad", [("baton.reason", b"r")])])
    # The driver crashes after commit; a new process replays batch 0 with the same range.
    again = make(bootstrap, names, app_name, Slot.BLUE)
    again.acquire(epoch=1)
    assert again.emit(0, {}, {0: 5}, [(b"a", b"1")]).skipped
    assert read_all(bootstrap, names["out"]) == [(b"a", b"1")]
    assert read_all(bootstrap, names["dead"]) == [(b"x", b"bad")]
    # A batch that straddles the committed position means diverged boundaries: refused, not emitted.
    with pytest.raises(ReplayConflict):
        again.emit(1, {0: 3}, {0: 9}, [(b"a", b"2")])
