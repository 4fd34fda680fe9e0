"""The control log's compare-and-set on the real broker: only winning writes enter the committed log,
so the compaction of the control topic (newest record per key) keeps the applied state.

Every test runs on the embedded Tansu broker and, with BATON_TEST_KAFKA_BOOTSTRAP set, on Apache Kafka
(where the compaction test waits for the log cleaner). A ControlWriter of its own stands for a writer in
another process (write_control shares one per app in a process)."""

import dataclasses
import os
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from baton.control_plane import ControlPlane, KafkaControlStore
from baton.kafka import control_log
from baton.kafka.admin import TopicMismatch, TopicSpec, delete_topics, ensure_topics
from baton.kafka.control_log import (
    ControlWriter,
    WriteConflict,
    apply_records,
    control_transactional_id,
    decode_for_app,
    read_control,
    write_control,
)
from baton.kafka.tail import read_tail
from baton.records import ControlRecord, Slot, SlotState
from tests.support.control_race import CYCLE, WriterStore, move_in_rounds

pytestmark = pytest.mark.integration
ON_APACHE_KAFKA = bool(os.environ.get("BATON_TEST_KAFKA_BOOTSTRAP"))


def create_topic(bootstrap: str, spec: TopicSpec) -> None:
    """ensure_topics, again while Apache Kafka lists the new topic with 0 partitions (its metadata
    propagates asynchronously after CreateTopics)."""
    for _ in range(40):
        try:
            ensure_topics(bootstrap, [spec])
            return
        except TopicMismatch:
            time.sleep(0.25)
    ensure_topics(bootstrap, [spec])


@pytest.fixture
def topic(bootstrap):
    """A control topic of the test's own (compacted, as baton.control is), deleted after it."""
    name = f"control-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, TopicSpec(name, 1, {"cleanup.policy": "compact"}))
    yield name
    delete_topics(bootstrap, [name])


def record(app: str, revision: int, writer: str, epoch: int = 1) -> ControlRecord:
    return ControlRecord(app=app, revision=revision, epoch=epoch, active=Slot.BLUE, writer=writer)


def committed_log(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """Every record of the topic a read_committed reader sees, in log order: (key, value)."""
    return read_tail(bootstrap, topic, lambda m: (m.key(), m.value()), last_n=None)


def of_app(app: str, log) -> list[ControlRecord]:
    return [r for k, v in log if (r := decode_for_app(app, k, v)) is not None]


def compacted(log):
    """What compaction may leave at most: the newest record of each key (the log in order otherwise)."""
    newest = {key: i for i, (key, _) in enumerate(log)}
    return [kv for i, kv in enumerate(log) if newest[kv[0]] == i]


def assert_chain(app: str, log) -> ControlRecord:
    """The app's committed records each follow the one before (revision + 1), and compaction keeps the
    applied record: the state is the same read from the whole log, the compacted log or read_control."""
    recs = of_app(app, log)
    assert [r.revision for r in recs] == list(range(recs[0].revision, recs[0].revision + len(recs))), (
        f"a committed record breaks the revision chain: {[(r.revision, r.writer) for r in recs]}"
    )
    applied = apply_records(None, recs)
    assert apply_records(None, of_app(app, compacted(log))) == applied == recs[-1]
    return applied


def race(monkeypatch, bootstrap: str, topic: str, records: list[ControlRecord]) -> dict[str, object]:
    """Write each record with its own writer (its own producer) from the same read: every writer has
    initialised and read before any of them commits. writer name -> its result or exception."""
    barrier = threading.Barrier(len(records), timeout=60)
    local = threading.local()
    read = control_log.read_records

    def read_then_wait(*args, **kwargs):
        out = read(*args, **kwargs)
        if not getattr(local, "waited", False):  # the read before the commit, not the read-back
            local.waited = True
            barrier.wait()
        return out

    results: dict[str, object] = {}

    def write(rec: ControlRecord) -> None:
        try:
            results[rec.writer] = ControlWriter(bootstrap, rec.app).write(rec, topic)
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test looks at
            results[rec.writer] = exc

    with monkeypatch.context() as m:
        m.setattr(control_log, "read_records", read_then_wait)
        threads = [threading.Thread(target=write, args=(r,)) for r in records]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert len(results) == len(records), results
    return results


def winner_of(results: dict[str, object]) -> ControlRecord:
    won = [r for r in results.values() if isinstance(r, ControlRecord)]
    lost = [r for r in results.values() if not isinstance(r, ControlRecord)]
    assert len(won) == 1 and all(isinstance(e, WriteConflict) for e in lost), results
    return won[0]


def test_of_two_writers_racing_for_a_revision_only_the_winner_is_committed(bootstrap, topic, monkeypatch):
    app = f"race-{uuid.uuid4().hex[:6]}"
    write_control(bootstrap, record(app, 1, "first"), topic)

    results = race(monkeypatch, bootstrap, topic, [record(app, 2, "a"), record(app, 2, "b")])
    winner = winner_of(results)

    log = committed_log(bootstrap, topic)
    # The loser initialised first, so the winner's init fenced it before it sent anything (its record
    # waits in the client until the commit): its record is on neither broker, even on Tansu, which
    # shows aborted records that reached it. A non-transactional loser's record would be here, after
    # the winner's, and the only revision-2 record compaction keeps.
    assert [(r.revision, r.writer) for r in of_app(app, log)] == [(1, "first"), (2, winner.writer)]
    assert assert_chain(app, log) == winner == read_control(bootstrap, app, topic)


@pytest.mark.parametrize("winner_cached", [False, True], ids=["new-writer", "cached-writer"])
def test_a_writer_fenced_with_its_record_at_the_broker_is_aborted(bootstrap, topic, winner_cached):
    """A writer whose record reached the broker inside its open transaction (it died inside its commit,
    or is about to commit): the next writer aborts that transaction by initialising. A new writer
    initialises first thing; this process's writer, initialised before the loser (it wrote revision 1),
    finds the open transaction holding its read back and initialises again."""
    app = f"inflight-{uuid.uuid4().hex[:6]}"
    write_control(bootstrap, record(app, 1, "first"), topic)
    loser = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": control_transactional_id(app), "linger.ms": 0}
    )
    loser.init_transactions(30)
    loser.begin_transaction()
    loser.produce(topic, record(app, 2, "loser").to_bytes(), app.encode())
    assert loser.flush(10) == 0  # at the broker, in the open transaction

    winner = record(app, 2, "winner")
    t0 = time.monotonic()
    try:
        outcome = (
            write_control(bootstrap, winner, topic)
            if winner_cached
            else ControlWriter(bootstrap, app).write(winner, topic)
        )
    except WriteConflict as exc:
        outcome = exc
    took = time.monotonic() - t0
    if winner_cached:  # it waited for the open transaction before it initialised again
        assert took >= control_log.OPEN_TRANSACTION_WAIT_S, took
    with pytest.raises(KafkaException):  # Apache Kafka: fenced; Tansu closes the connection (timed out)
        loser.commit_transaction(3)

    log = committed_log(bootstrap, topic)
    applied = assert_chain(app, log)
    assert read_control(bootstrap, app, topic) == applied
    if ON_APACHE_KAFKA:
        # Apache Kafka: the aborted record is invisible to read_committed readers; the winner wrote.
        assert outcome == record(app, 2, "winner") == applied
        assert [r.writer for r in of_app(app, log)] == ["first", "winner"]
    else:
        # Tansu shows the aborted record to read_committed readers (baton/local/broker.py, defect 3):
        # the next writer reads revision 2 as applied and refuses to write its own revision 2, so the
        # log still has one record per revision and every reader applies the same one (the loser's).
        assert isinstance(outcome, WriteConflict), outcome
        assert [r.writer for r in of_app(app, log)] == ["first", "loser"]


def test_a_fenced_writer_fails_and_the_control_plane_retries_to_convergence(bootstrap, topic):
    app = f"fenced-{uuid.uuid4().hex[:6]}"
    write_control(bootstrap, record(app, 1, "first"), topic)  # this process's writer of the app, initialised
    other = ControlWriter(bootstrap, app)
    other.init()  # another process's writer initialises: it fences ours, writing nothing

    with pytest.raises(WriteConflict, match="another writer of the app initialised first"):
        write_control(bootstrap, record(app, 2, "fenced"), topic)  # revision 2 follows: only the fence refuses it
    assert [r.writer for r in of_app(app, committed_log(bootstrap, topic))] == ["first"]

    plane = ControlPlane(KafkaControlStore(bootstrap, topic), writer="retry")
    done = plane.update(app, lambda r: dataclasses.replace(r, epoch=r.epoch + 1))  # ours initialises again
    assert (done.revision, done.epoch, done.writer) == (2, 2, "retry")
    assert read_control(bootstrap, app, topic) == done
    with pytest.raises(WriteConflict):  # and that fenced the other one in turn
        other.write(record(app, 3, "other"), topic)
    assert assert_chain(app, committed_log(bootstrap, topic)) == done


def test_a_write_already_followed_by_another_is_confirmed(bootstrap, topic, monkeypatch):
    """The read-back asks whether readers applied the record, not whether it is still the newest: a
    winner told it lost would retry its change on top of its own (a second epoch bump, say)."""
    app = f"followed-{uuid.uuid4().hex[:6]}"
    write_control(bootstrap, record(app, 1, "first"), topic)
    ours, theirs = ControlWriter(bootstrap, app), ControlWriter(bootstrap, app)
    read, calls = control_log.read_records, []

    def read_back_after_theirs(writer_consumer, *args, **kwargs):
        calls.append(writer_consumer)
        if len(calls) == 2:  # our read-back, after our commit: another writer commits revision 3 first
            theirs.write(record(app, 3, "theirs", epoch=3), topic)
        return read(writer_consumer, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(control_log, "read_records", read_back_after_theirs)
        assert ours.write(record(app, 2, "ours", epoch=2), topic) == record(app, 2, "ours", epoch=2)
    log = committed_log(bootstrap, topic)
    assert [r.writer for r in of_app(app, log)] == ["first", "ours", "theirs"]
    assert assert_chain(app, log) == read_control(bootstrap, app, topic) == record(app, 3, "theirs", epoch=3)


def test_a_write_waits_for_an_open_transaction_before_it_reads(bootstrap, topic):
    """Another app's control transaction, open, hides what was committed after it from read_committed
    readers. A write that read only up to it could miss a revision of its own app committed since and
    commit that revision a second time (which compaction would keep): the write reads past it instead."""
    app, other_app = f"behind-{uuid.uuid4().hex[:6]}", f"open-{uuid.uuid4().hex[:6]}"
    committer = Producer({"bootstrap.servers": bootstrap, "transactional.id": control_transactional_id(app)})
    committer.init_transactions(30)

    def commit(rec: ControlRecord) -> None:
        committer.begin_transaction()
        committer.produce(topic, rec.to_bytes(), rec.key())
        committer.commit_transaction(30)

    commit(record(app, 1, "first"))
    opened = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": control_transactional_id(other_app), "linger.ms": 0}
    )
    opened.init_transactions(30)
    opened.begin_transaction()
    opened.produce(topic, record(other_app, 1, "open").to_bytes(), other_app.encode())
    assert opened.flush(10) == 0
    commit(record(app, 2, "behind"))  # committed after the open transaction's record
    assert read_control(bootstrap, app, topic).revision == 1  # readers stop at the open transaction

    ends = threading.Timer(2.0, lambda: opened.commit_transaction(30))
    ends.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(WriteConflict, match="applied revision is 2"):
            ControlWriter(bootstrap, app).write(record(app, 2, "stale"), topic)  # initialised after "behind"
        assert time.monotonic() - t0 >= 1.5  # it waited for the open transaction
    finally:
        ends.join()
    log = committed_log(bootstrap, topic)
    assert [r.writer for r in of_app(app, log)] == ["first", "behind"]
    assert assert_chain(app, log).writer == "behind"


def test_a_transaction_left_open_by_another_app_dead_writer_is_aborted_by_the_next_write(bootstrap, topic):
    """A writer of another app that died inside its commit leaves its transaction open: Tansu never
    times it out, and every read_committed reader of the topic (all apps) would stop before it for good.
    The next write of any app, held back longer than a commit takes, ends it (initialises that app's
    transactional.id) and goes on within seconds, not at its 30 s timeout."""
    app, dead_app = f"live-{uuid.uuid4().hex[:6]}", f"dead-{uuid.uuid4().hex[:6]}"
    write_control(bootstrap, record(app, 1, "first"), topic)
    dead = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": control_transactional_id(dead_app),
            "linger.ms": 0,
            "transaction.timeout.ms": 600_000,
        }
    )  # Apache Kafka would wait 10 min too
    dead.init_transactions(30)
    dead.begin_transaction()
    dead.produce(topic, record(dead_app, 1, "never committed").to_bytes(), dead_app.encode())
    assert dead.flush(10) == 0  # at the broker, then the writer "dies": nothing ends its transaction
    t0 = time.monotonic()
    written = ControlWriter(bootstrap, app).write(record(app, 2, "after"), topic)
    took = time.monotonic() - t0
    assert written.writer == "after" and took < control_log.WRITE_TIMEOUT_S / 2, took
    # Readers are no longer held back: "after" lies beyond the dead transaction's record.
    assert read_control(bootstrap, app, topic).writer == "after"
    if ON_APACHE_KAFKA:  # aborted: invisible. (Tansu shows the aborted record that reached it.)
        assert read_control(bootstrap, dead_app, topic) is None


def test_concurrent_control_planes_lose_no_update_and_commit_no_loser(bootstrap, topic):
    """Writers in different processes (a ControlWriter each), each incrementing the epoch through the
    control plane: every increment lands once and the committed log is one unbroken revision chain."""
    app = f"busy-{uuid.uuid4().hex[:6]}"
    write_control(bootstrap, record(app, 1, "first"), topic)
    writers, increments = 3, 4

    errors: list[Exception] = []

    def work(name: str) -> None:
        plane = ControlPlane(WriterStore(bootstrap, topic, app), writer=name)
        try:
            for _ in range(increments):
                for _attempt in range(40):
                    try:
                        plane.update(app, lambda r: dataclasses.replace(r, epoch=r.epoch + 1))
                        break
                    except WriteConflict:
                        continue
                else:
                    raise AssertionError(f"{name}: no update in 40 x 5 attempts")
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    total = writers * increments
    log = committed_log(bootstrap, topic)
    assert len(of_app(app, log)) == 1 + total
    final = assert_chain(app, log)
    assert (final.revision, final.epoch) == (1 + total, 1 + total)  # no increment lost
    assert read_control(bootstrap, app, topic) == final


def test_both_slots_moved_at_once_never_stall_the_control_topic(bootstrap, topic):
    """The mapped stop (or start) of both slots: two tasks, each its own writer of the app, each moving
    its slot at the same time. Two writers of one app fencing each other in a burst can leave a commit's
    transaction open on Tansu with no coordinator state behind it: initialising the transactional.id
    again does not end it, and every read_committed reader of the topic (every app's) stopped before it
    for good (in CI, every later lifecycle step timed out at 30 s). Every move lands, in seconds, and
    the committed log is one unbroken chain."""
    app = f"pair-{uuid.uuid4().hex[:6]}"
    setup = ControlPlane(KafkaControlStore(bootstrap, topic), writer="setup")
    for slot in Slot:
        setup.move_slot(app, slot, SlotState.STARTING)
        setup.move_slot(app, slot, SlotState.RUNNING)
    before = read_control(bootstrap, app, topic)
    cycle, rounds = [SlotState.STOPPING, SlotState.STOPPED, SlotState.STARTING, SlotState.RUNNING], 10

    errors: list[Exception] = []
    slowest: dict[Slot, float] = {}

    def move_through_cycles(slot: Slot) -> None:
        plane = ControlPlane(WriterStore(bootstrap, topic, app), writer=slot.value)
        try:
            for i in range(rounds * len(cycle)):
                t0 = time.monotonic()
                for _attempt in range(40):
                    try:
                        plane.move_slot(app, slot, cycle[i % len(cycle)], reason=f"move {i}")
                        break
                    except WriteConflict:
                        continue
                else:
                    raise AssertionError(f"{slot.value}: move {i} lost 40 x 5 compare-and-sets")
                slowest[slot] = max(slowest.get(slot, 0.0), time.monotonic() - t0)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=move_through_cycles, args=(slot,)) for slot in Slot]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not any(t.is_alive() for t in threads), "a writer still waits after 10 minutes"
    assert not errors, errors
    # A stalled topic costs a move at least a 30 s read timeout; ending the open transaction takes
    # seconds (a commit Tansu leaves unanswered costs its 10 s timeout, on a slow host a little more).
    assert max(slowest.values()) < control_log.WRITE_TIMEOUT_S, slowest
    log = committed_log(bootstrap, topic)
    final = assert_chain(app, log)
    assert final.revision == before.revision + 2 * rounds * len(cycle)  # every move landed once
    assert {slot: spec.desired for slot, spec in final.slots.items()} == {s: SlotState.RUNNING for s in Slot}
    assert read_control(bootstrap, app, topic) == final


def test_two_processes_moving_their_slots_at_once_never_stall_the_control_topic(bootstrap, topic):
    """The mapped start (or stop) of both slots as it runs: two task processes, each initialising a new
    producer of the app's transactional.id just before its write, both at the same moment. An init that
    Tansu handled inside the other's commit left that commit's transaction open for good, and every
    read_committed reader of the topic stopped before it (CI: every later lifecycle step and health
    check of the e2e session failed; reproduced in 18 rounds). Each process's commit and init are
    serialised on the host (baton.kafka.txn_window): every move lands in seconds, one unbroken chain."""
    import multiprocessing

    app, rounds = f"procs-{uuid.uuid4().hex[:6]}", 40
    setup = ControlPlane(KafkaControlStore(bootstrap, topic), writer="setup")
    for slot in Slot:
        setup.move_slot(app, slot, SlotState.STARTING)
        setup.move_slot(app, slot, SlotState.RUNNING)
    before = read_control(bootstrap, app, topic)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(len(Slot)), ctx.Queue()
    procs = [
        ctx.Process(target=move_in_rounds, args=(bootstrap, topic, app, slot.value, rounds, barrier, results))
        for slot in Slot
    ]
    for proc in procs:
        proc.start()
    try:
        outcomes = [results.get(timeout=600) for _ in procs]
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    assert [error for _, _, error in outcomes] == [None, None], outcomes
    # A stalled topic costs a move its 30 s read timeout; a move takes well under a second.
    assert max(slowest for _, slowest, _ in outcomes) < control_log.WRITE_TIMEOUT_S / 2, outcomes
    final = assert_chain(app, committed_log(bootstrap, topic))
    assert final.revision == before.revision + len(Slot) * rounds  # every move landed once
    assert {slot: spec.desired for slot, spec in final.slots.items()} == {
        s: CYCLE[(rounds - 1) % len(CYCLE)] for s in Slot
    }
    assert read_control(bootstrap, app, topic) == final


def count_records(bootstrap: str, topic: str) -> int:
    """Records in the partition now, aborted ones included (read uncommitted)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"count-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_uncommitted",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        low = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0]
        c.assign([TopicPartition(topic, 0, low)])
        n, deadline = 0, time.monotonic() + 30
        while time.monotonic() < deadline:
            for m in c.consume(10_000, 0.1):
                if m.error() is None:
                    n += 1
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    return n
                else:
                    raise KafkaException(m.error())
        raise TimeoutError(f"{topic} not read to its end")
    finally:
        c.close()


def test_compaction_keeps_the_last_winner(bootstrap, monkeypatch):
    """On Apache Kafka the log cleaner really compacts (closed segments: segment.ms small, segments rolled
    by later writes): read_control is the last winner after it ran. Tansu does not compact: the same races
    and the simulated compaction run there."""
    topic = f"control-compact-{uuid.uuid4().hex[:8]}"
    create_topic(
        bootstrap,
        TopicSpec(
            topic,
            1,
            {
                "cleanup.policy": "compact",
                "segment.ms": "100",
                "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": "100",
            },
        ),
    )
    try:
        app, other = f"compact-{uuid.uuid4().hex[:6]}", f"other-{uuid.uuid4().hex[:6]}"
        write_control(bootstrap, record(app, 1, "first"), topic)
        write_control(bootstrap, record(other, 1, "o1"), topic)
        for rev in (2, 3, 4):
            time.sleep(0.15)  # a new segment for each round
            winner = winner_of(
                race(monkeypatch, bootstrap, topic, [record(app, rev, f"a{rev}"), record(app, rev, f"b{rev}")])
            )
        for rev in range(2, 7):  # another key's writes roll the segments past the races
            time.sleep(0.15)
            write_control(bootstrap, record(other, rev, f"o{rev}"), topic)
        written = 4 + 6  # the app's first record and 3 winners, the other app's 6 records
        log = committed_log(bootstrap, topic)  # on Apache Kafka, maybe compacted already
        assert assert_chain(app, log) == winner
        assert assert_chain(other, log).writer == "o6"
        if ON_APACHE_KAFKA:
            deadline = time.monotonic() + 60
            while count_records(bootstrap, topic) >= written:
                assert time.monotonic() < deadline, f"the log cleaner did not compact {topic} within 60 s"
                time.sleep(1)
            log = committed_log(bootstrap, topic)
            assert len(log) < written
            assert assert_chain(app, log) == winner  # what is left of the chain still ends at the winner
            assert assert_chain(other, log).writer == "o6"
        else:  # no compaction, and no loser sent anything (read uncommitted shows no more records)
            assert count_records(bootstrap, topic) == len(log) == written
        assert read_control(bootstrap, app, topic) == winner
        assert read_control(bootstrap, other, topic).writer == "o6"
    finally:
        delete_topics(bootstrap, [topic])


def read_with(bootstrap: str, topic: str, app: str, since=None) -> control_log.AppLog:
    """read_records through a consumer of the writer's kind, resuming at `since` (a ReadPoint) if given."""
    c = control_log._consumer(bootstrap)
    try:
        return control_log.read_records(c, topic, app, since=since)
    finally:
        c.close()


def test_a_writer_resumes_its_reads_where_the_last_one_stopped(bootstrap, topic):
    """A write reads the control topic twice (the compare-and-set, the read-back): from where the
    writer's previous read stopped, not from the start (Tansu never compacts: full reads grew to ~0.35 s
    at 8,000 offsets). What it folds is the same as a full read's."""
    app, other = f"resume-{uuid.uuid4().hex[:6]}", f"other-{uuid.uuid4().hex[:6]}"
    ours = ControlWriter(bootstrap, app)
    try:
        ours.write(record(app, 1, "ours"), topic)
        write_control(bootstrap, record(other, 1, "other"), topic)
        ours.write(record(app, 2, "ours"), topic)
        point = ours._read_points[topic]
        assert point.applied == record(app, 2, "ours")
        # Another writer of the app, then another app, write after the point.
        ControlWriter(bootstrap, app).write(record(app, 3, "theirs"), topic)
        write_control(bootstrap, record(other, 2, "other"), topic)
        resumed, full = read_with(bootstrap, topic, app, since=point), read_with(bootstrap, topic, app)
        assert resumed.base == record(app, 2, "ours") and resumed.records == [record(app, 3, "theirs")]
        assert full.base is None and [r.revision for r in full.records] == [1, 2, 3]
        assert resumed.applied() == full.applied() == record(app, 3, "theirs")
        assert resumed.point == full.point  # both stopped at the last message, with the same state
        # The writer's next write resumes too, and decides on the state the other writer left.
        with pytest.raises(WriteConflict, match="applied revision is 3"):
            ours.write(record(app, 3, "ours"), topic)
        for _ in range(3):  # the other writer's init fenced ours: its first commit fails, as a retry's would
            try:
                assert ours.write(record(app, 4, "ours"), topic) == record(app, 4, "ours")
                break
            except WriteConflict as exc:
                assert "another writer of the app initialised first" in str(exc)
        else:
            pytest.fail("revision 4 never written")
    finally:
        ours.close()
    assert assert_chain(app, committed_log(bootstrap, topic)) == record(app, 4, "ours")


def test_a_read_point_that_is_no_longer_there_reads_from_the_start(bootstrap, topic):
    """A point whose message is not at its offset any more (a topic recreated, a broker that lost its
    data, the message compacted away), or beyond the end (a topic recreated smaller), is not resumed
    at: the read starts over. (Recreating the topic under a live writer is not what this does: on Tansu,
    deleting a topic a client of the process knows crashes librdkafka, see docs/operations.md.)"""
    app = f"gone-{uuid.uuid4().hex[:6]}"
    for revision in (1, 2):
        write_control(bootstrap, record(app, revision, "w"), topic)
    point = read_with(bootstrap, topic, app).point
    elsewhere = dataclasses.replace(point, value=b"another message", applied=record(app, 7, "w"))
    beyond = dataclasses.replace(point, offset=point.offset + 10_000, applied=record(app, 7, "w"))
    for since in (elsewhere, beyond):
        t0 = time.monotonic()
        log = read_with(bootstrap, topic, app, since=since)
        assert log.base is None and [r.revision for r in log.records] == [1, 2], since
        assert log.applied() == record(app, 2, "w")
        assert time.monotonic() - t0 < 10  # Tansu answers a fetch beyond the end with nothing: never asked
