"""Baton's readers of its small topics reach the end of a partition of many batches on Tansu, which
answers a fetch whose wait is too short for such a partition with nothing at all (baton.kafka.fetch_wait).

Before: a control write timed out after ~700 control writes on the embedded broker (its 1 ms fetch wait
stopped working at ~1,450 batches), a lease or status read after some hours of renewals. These tests run
on a Tansu broker of their own (the behaviour is Tansu's; a crowded baton.leases would slow the shared
one), and one runs on the session's broker (Apache Kafka with BATON_TEST_KAFKA_BOOTSTRAP): there a short
wait works, and nothing lengthens."""

import gc
import os
import signal
import time
import uuid
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from baton.apps import load_app
from baton.kafka import fetch_wait
from baton.kafka.admin import TopicSpec, delete_topics, ensure_topics
from baton.kafka.control_log import ControlWriter, close_writers, read_control
from baton.kafka.fetch_wait import short_wait
from baton.kafka.tail import probe_ends, read_tail
from baton.local.broker import Broker
from baton.local.procs import free_port
from baton.records import ControlRecord, Slot, SlotState
from baton.settings import LEASES_TOPIC, LEASES_TOPIC_CONFIG
from baton.status_feed import StatusFeed
from spark_apps.runtime.coordination import lease as lease_module
from spark_apps.runtime.coordination.lease import LeaseKeeper
from spark_apps.runtime.source.input_ends import InputEnds

pytestmark = pytest.mark.integration

# Far past where a 1 ms wait stops working on Tansu (~1,450 batches), within a 10 ms wait's reach.
BATCHES = 6000


def fill(bootstrap: str, topic: str, batches: int, per_batch: int = 1) -> None:
    """Records of no app in `batches` batches (one record each, as control writes and lease renewals are;
    more, as an app's input has)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000})
    for _ in range(batches):
        for _ in range(per_batch):
            p.produce(topic, b"x" * 200, b"filler")
        p.flush(10)
    p.close()


def records_read(bootstrap: str, topic: str, wait_ms: int, within_s: float) -> int:
    """How many records a plain consumer with fetch.wait.max.ms=wait_ms reads from the start within within_s."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"probe-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": wait_ms,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        n, deadline = 0, time.monotonic() + within_s
        while time.monotonic() < deadline:
            for m in c.consume(10_000, 0.05):
                if m.error() is None:
                    n += 1
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    return n
        return n
    finally:
        c.close()


@pytest.fixture(scope="module")
def tansu_broker(tmp_path_factory):
    b = Broker(state_dir=tmp_path_factory.mktemp("crowded-broker"), port=free_port())
    b.start()
    yield b
    close_writers(b.bootstrap)
    gc.collect()  # clients only a collection frees (a lease keeper's) would retry the stopped broker
    b.stop()


@pytest.fixture(scope="module")
def tansu(tansu_broker):
    return tansu_broker.bootstrap


@pytest.fixture(scope="module")
def crowded(tansu):
    """A compacted topic (as baton.control is) of BATCHES batches on the Tansu broker of this module."""
    topic = f"crowded-{uuid.uuid4().hex[:8]}"
    ensure_topics(tansu, [TopicSpec(topic, 1, {"cleanup.policy": "compact"})])
    fill(tansu, topic, BATCHES)
    return topic


def record(app: str, revision: int) -> ControlRecord:
    return ControlRecord(app=app, revision=revision, epoch=1, active=Slot.BLUE, writer="test")


def test_tansu_answers_a_fetch_wait_too_short_for_the_partition_with_nothing(tansu, crowded):
    # The premise: if this fails, Tansu changed and the lengthening may no longer be needed.
    assert records_read(tansu, crowded, wait_ms=1, within_s=3) == 0
    assert records_read(tansu, crowded, wait_ms=10, within_s=10) == BATCHES


def test_control_writes_and_reads_go_on_past_many_batches(tansu, crowded):
    app = f"app{uuid.uuid4().hex[:6]}"
    writer = ControlWriter(tansu, app)
    try:
        t0 = time.monotonic()
        writer.write(record(app, 1), crowded)
        writer.write(record(app, 2), crowded)
        first_two_s = time.monotonic() - t0
        assert read_control(tansu, app, crowded) == record(app, 2)
    finally:
        writer.close()
    assert fetch_wait.fetch_wait_ms(tansu, crowded, 1) >= 10  # lengthened, and kept for the topic
    # Lengthening costs STALL_S per step once, well within a write's timeout.
    assert first_two_s < 10, first_two_s


def test_a_tail_read_and_the_status_feed_reach_the_end_past_many_batches(tansu):
    """40,000 batches: past a 10 ms wait's reach too, so the tail read lengthens its wait (in a fast phase
    of the host, CI on 2026-12-03, a 10 ms wait reached the end of 20,000 within 5 s)."""
    topic = f"crowded-{uuid.uuid4().hex[:8]}"
    ensure_topics(tansu, [TopicSpec(topic, 1, {})])
    fill(tansu, topic, 40_000)
    assert records_read(tansu, topic, wait_ms=10, within_s=5) < 40_000  # the premise, as above
    assert len(read_tail(tansu, topic, lambda m: m.offset(), last_n=None)) == 40_000
    assert fetch_wait.fetch_wait_ms(tansu, topic, 10) >= 50
    feed = StatusFeed(tansu)
    feed.tails = {topic: None}  # the feed's reads of baton.status, .control and .leases, on this topic
    feed.refresh()
    assert feed.read[topic] == 40_000
    delete_topics(tansu, [topic])


def test_an_end_probe_lengthens_its_wait_instead_of_timing_out_on_many_batches(tansu):
    """The Spark source's end probe (every batch) and the slot's input-end reader: Tansu's ListOffsets end
    lies inside the last batch, and a fetch there with a 10 ms wait got nothing on a partition of 20,000
    batches, so every probe waited out its timeout (10 s for the source). 40,000 batches here: in a fast
    phase of the host (CI, 2026-12-02) a 10 ms wait still reached the end of 20,000."""
    topic = f"input-{uuid.uuid4().hex[:8]}"
    ensure_topics(tansu, [TopicSpec(topic, 1, {})])
    fill(tansu, topic, 40_000, per_batch=2)
    c = Consumer(
        {
            "bootstrap.servers": tansu,
            "group.id": f"probe-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
        }
    )
    try:
        bound = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        assert bound < 80_000  # Tansu's short end: the last batch's base + 1
        t0 = time.monotonic()
        ends, unsettled = probe_ends(c, topic, {0: bound}, 10.0, tansu, 10)
        assert unsettled == {0} and time.monotonic() - t0 < 5  # not the 10 s timeout
    finally:
        c.close()
    assert fetch_wait.fetch_wait_ms(tansu, topic, 10) == 50
    reader = InputEnds(tansu, topic, 1, interval_s=0.2)  # its next consumer has the longer wait
    reader.start()
    try:
        deadline = time.monotonic() + 10
        while reader.latest() != {0: 80_000} and time.monotonic() < deadline:
            time.sleep(0.1)
        assert reader.latest() == {0: 80_000}
        assert reader.fetch_wait == 50
    finally:
        reader.stop()
        reader.join(5)
    delete_topics(tansu, [topic])


def test_a_lease_keeper_sees_renewals_past_many_batches(tansu, monkeypatch):
    # Its own wait lasts tens of thousands of renewals on Tansu (~70,000 at 50 ms); the same stall at 1 ms,
    # ~1,450, is quicker to set up.
    monkeypatch.setattr(lease_module, "FETCH_WAIT_MS", 1)
    ensure_topics(tansu, [TopicSpec(LEASES_TOPIC, 1, LEASES_TOPIC_CONFIG)])
    fill(tansu, LEASES_TOPIC, 5000)
    follower = SimpleNamespace(snapshot=lambda: (None, None), processed=None)
    keeper = LeaseKeeper(
        load_app("click_counts"), Slot.BLUE, tansu, follower, state=lambda: SlotState.RUNNING, alive=lambda: True
    )
    keeper.start()
    try:
        deadline = time.monotonic() + 15
        while keeper.judge.mine is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert keeper.judge.mine is not None, "the keeper never saw its own renewal"
        assert keeper._fetch_wait > 1
    finally:
        keeper.stop()


def test_a_paused_broker_is_no_reason_to_wait_longer(tansu_broker, crowded):
    """A read stalls too while the broker does not answer at all (paused, unreachable): then its wait is
    kept, since a longer one would not help and would slow every later read of the topic in the process.
    short_wait tells the two apart."""
    c = Consumer({"bootstrap.servers": tansu_broker.bootstrap, "group.id": f"probe-{uuid.uuid4().hex[:8]}"})
    try:
        assert short_wait(c, crowded, 0, position=0)  # the broker answers and has records from there on
        end = c.get_watermark_offsets(TopicPartition(crowded, 0), timeout=10)[1]
        assert not short_wait(c, crowded, 0, position=end)  # at its end: a stall there is something else
        pid = tansu_broker.proc.pid()
        os.kill(pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            assert not short_wait(c, crowded, 0, position=0)
            assert time.monotonic() - t0 < 3
        finally:
            os.kill(pid, signal.SIGCONT)
        assert short_wait(c, crowded, 0, position=0)
    finally:
        c.close()


def test_a_short_wait_stays_short_on_a_broker_that_answers_at_once(bootstrap, topics):
    """On the session's broker (Tansu with few batches, or Apache Kafka with any): nothing lengthens."""
    topic = topics(control=1)["control"]
    app = f"app{uuid.uuid4().hex[:6]}"
    writer = ControlWriter(bootstrap, app)
    try:
        for revision in range(1, 21):
            writer.write(record(app, revision), topic)
        assert read_control(bootstrap, app, topic) == record(app, 20)
    finally:
        writer.close()
    assert fetch_wait.fetch_wait_ms(bootstrap, topic, 1) == 1
