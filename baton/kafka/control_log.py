"""The control topic as a compare-and-set log.

Records for one app are applied in log order; a record is applied only if its revision is exactly
one more than the last applied revision (the first applied record may have any revision, since
compaction may have removed older ones). So a stale or duplicated record is ignored identically by
every reader. Shared by the Spark harness (follows its app) and the Airflow hooks.

Only winning writes may enter the committed log, because the topic is compacted (key = app) and
compaction keeps only the newest record per key: a losing write appended after the winner would
survive it and be applied by every reader. So writes are transactional, with one transactional.id
per app (`baton.control.<app>`) shared by every writer of that app in every process. A writer
initialises its producer (which fences every other writer of the app: an open transaction of theirs
is aborted, their later commits fail), reads the log to its end (past any open transaction: a
read_committed reader stops before one), writes only if its revision follows the applied one (else
WriteConflict, nothing written) and commits. The commit succeeds only if no other writer initialised
since, so nothing was committed for the app after the read: every committed control record's revision
is the previous committed one + 1, and the newest one per key, all that compaction keeps, is the
applied state. A fenced commit raises WriteConflict: re-read, decide again.

Tansu (the embedded broker) shows records of an aborted transaction that reached it to read_committed
readers. The record is held in the client until the commit, so only a writer fenced inside its commit
leaks one; the next writer then reads it as applied (the revision rule keeps readers agreeing), and
the fenced writer's read-back tells it so. Tansu can also leave such a commit's transaction open with
no coordinator state behind it (two writers of one app fencing each other in a burst, as the mapped
stop of both slots does): initialising the transactional.id again does not end it, so a held-back
write ends it with an abort of its own (end_open_transactions).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import uuid
import warnings
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from baton.kafka.client_config import kafka_config
from baton.kafka.fetch_wait import StallWatch, fetch_wait_ms, reopen_longer, short_wait
from baton.kafka.messages import offset_of
from baton.kafka.txn_window import txn_window
from baton.records import ControlRecord, RecordError

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Producer

log = logging.getLogger(__name__)

# A control transaction is open for the few milliseconds of its commit. Kept short: an open
# transaction holds back every read_committed reader of the topic (all apps), and Apache Kafka aborts
# one whose writer died only after this timeout (Tansu never does: the app's next writer aborts it).
TRANSACTION_TIMEOUT_MS = 10_000
# Initialising (the transaction coordinator's first use on Apache Kafka takes seconds), the reads
# (which may wait out an open transaction: TRANSACTION_TIMEOUT_MS + the broker's abort check) and the commit.
WRITE_TIMEOUT_S = 30.0
# A commit takes milliseconds; one that times out is resolved by initialising again (it also does when
# Tansu drops the connection of a commit fenced after its record was sent).
COMMIT_TIMEOUT_S = 10.0
# A write's first read waits this long for an open control transaction before it initialises again.
OPEN_TRANSACTION_WAIT_S = 2.0
# The writer's reads end with a fetch that finds the end, which returns after this wait: EOF in a
# millisecond. Longer on a control topic of many batches on Tansu (baton.kafka.fetch_wait).
FETCH_WAIT_MS = 1


def apply_records(current: ControlRecord | None, records: Iterable[ControlRecord]) -> ControlRecord | None:
    """Fold control records (one app, log order) into the current desired state."""
    for rec in records:
        if current is None or rec.revision == current.revision + 1:
            current = rec
    return current


def decode_for_app(app: str, key: bytes | None, value: bytes | None) -> ControlRecord | None:
    """The control record in a message if it is for `app` and well formed; None otherwise.

    A malformed control record is skipped, not fatal: a reader must never crash-loop on the
    control topic. The writer (the control plane) validates before writing.
    """
    if key != app.encode() or value is None:
        return None
    try:
        rec = ControlRecord.from_bytes(value)
    except RecordError:
        return None
    return rec if rec.app == app else None


class WriteConflict(RuntimeError):
    """Another writer applied a record first: re-read the state and decide again."""


def read_control(
    bootstrap: str, app: str, control_topic: str | None = None, timeout_s: float = 15.0
) -> ControlRecord | None:
    """The applied control state of `app`, reading the control topic to its end (read committed).

    While some app's control transaction is open, this is the state before it (the end a
    read_committed reader sees); a writer waits for it (ControlWriter)."""
    from baton.kafka.tail import read_tail
    from baton.settings import CONTROL_TOPIC

    records = read_tail(
        bootstrap,
        control_topic or CONTROL_TOPIC,
        lambda m: decode_for_app(app, m.key(), m.value()),
        last_n=None,
        timeout_s=timeout_s,
    )
    return apply_records(None, records)


def control_transactional_id(app: str) -> str:
    """The one transactional.id of every control writer of `app`."""
    return f"baton.control.{app}"


def write_control(bootstrap: str, record: ControlRecord, control_topic: str | None = None) -> ControlRecord:
    """Append `record` if its revision is the applied revision + 1 and confirm it was applied.

    Raises WriteConflict if it does not follow, or if another writer of the app fenced this one (the
    caller re-reads and decides again). Writing the same record again after a crash is harmless: its
    revision no longer follows the applied one, so it is refused. Uses this process's writer for the
    app (see _writer).
    """
    from baton.settings import CONTROL_TOPIC

    return _writer(bootstrap, record.app).write(record, control_topic or CONTROL_TOPIC)


def _fenced(err) -> bool:
    from confluent_kafka import KafkaError

    return (
        err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH) or err.fatal()
    )


class ControlWriter:
    """A control writer of one app: a transactional producer (initialised once, again after it was
    fenced) and a consumer for its reads; one write at a time. write_control uses one per process and
    app; another instance is another writer, as if in another process."""

    def __init__(self, bootstrap: str, app: str):
        self.bootstrap, self.app = bootstrap, app
        self._lock = threading.Lock()
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._consumer_wait = FETCH_WAIT_MS  # the fetch.wait.max.ms of _consumer
        self._read_points: dict[str, ReadPoint] = {}  # per topic, where the last read stopped: the next resumes there

    def init(self) -> None:
        """Initialise the producer now (if it is not): this fences every other writer of the app."""
        with self._lock:
            self._init()

    def _init(self):
        from confluent_kafka import Producer

        if self._producer is None:
            p = Producer(
                kafka_config(
                    self.bootstrap,
                    {
                        "transactional.id": control_transactional_id(self.app),
                        # Held in the client until commit_transaction flushes it: the record reaches the broker
                        # inside the commit, so a writer fenced before its commit sends nothing (on Tansu a
                        # sent record of an aborted transaction stays visible). Below TRANSACTION_TIMEOUT_MS,
                        # which librdkafka requires.
                        "linger.ms": TRANSACTION_TIMEOUT_MS // 2,
                        "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                    },
                )
            )
            # Connected first: librdkafka asks again for the transaction coordinator only 500 ms after
            # a first query that found no broker up, which a new client's init would otherwise pay.
            p.list_topics(timeout=WRITE_TIMEOUT_S)
            with txn_window(self.bootstrap, control_transactional_id(self.app)):  # never inside another's commit
                p.init_transactions(WRITE_TIMEOUT_S)
            self._producer = p
        return self._producer

    def write(self, record: ControlRecord, topic: str) -> ControlRecord:
        """See write_control."""
        from confluent_kafka import KafkaException

        if record.app != self.app:
            raise ValueError(f"the control writer of {self.app!r} cannot write a record of {record.app!r}")
        with self._lock:
            self._init()
            # Why this compare-and-set holds though the producer may have been initialised long before
            # (cached): our commit below succeeds only if no other writer of the app initialised after
            # our init, and every writer initialised before it had its transaction decided (committed
            # or aborted) by our init. So if our commit succeeds, every other record of the app it
            # follows was committed before our init, hence before this read, which goes to the end
            # (past open transactions: _read_through; a read that initialises again reads again after) and
            # so saw it. (It resumes where this writer's previous read stopped, ReadPoint: the log before
            # that point is what the previous read folded, appending cannot change it.)
            applied = self._read_through(topic).applied()
            p = self._producer  # initialised again if the read had to end an open transaction
            assert p is not None  # by _init above, or by the read
            if not _follows(applied, record):
                raise WriteConflict(
                    f"control write for {self.app} revision {record.revision} refused: applied revision is "
                    f"{applied.revision if applied else None}"
                )
            try:
                with txn_window(self.bootstrap, control_transactional_id(self.app)):  # no other writer's init inside it
                    p.begin_transaction()
                    p.produce(topic, record.to_bytes(), record.key())
                    p.commit_transaction(COMMIT_TIMEOUT_S)
            except KafkaException as exc:
                return self._after_failed_commit(exc, record, topic)
            # Read back: readers applied it (another writer's next record may follow it already). Always
            # so on Apache Kafka once committed; kept against a broker that shows aborted records (Tansu).
            if not _was_applied(record, self._read_through(topic)):
                raise WriteConflict(
                    f"control write for {self.app} revision {record.revision} committed but not applied"
                )
            return record

    def _after_failed_commit(self, exc, record: ControlRecord, topic: str) -> ControlRecord:
        from confluent_kafka import KafkaException

        err = exc.args[0]
        abortable = err.txn_requires_abort() and not _fenced(err)
        if abortable:  # e.g. the record was refused: nothing committed, the producer is usable again
            try:
                assert self._producer is not None  # its commit failed just now
                with txn_window(self.bootstrap, control_transactional_id(self.app)):
                    self._producer.abort_transaction(COMMIT_TIMEOUT_S)
            except Exception as abort_exc:
                self._drop_producer()  # the next write initialises again, which aborts it
                if not (isinstance(abort_exc, KafkaException) and _fenced(abort_exc.args[0])):
                    raise
                # Another writer initialised between the failed commit and its abort (Apache Kafka answers
                # a commit racing that init with INVALID_TXN_STATE, then the abort with fenced): as fenced.
                exc, err, abortable = abort_exc, abort_exc.args[0], False
        elif _fenced(err):
            # Another writer initialised after us: our transaction is aborted, this producer is done.
            self._drop_producer()
        else:
            # Outcome unknown (e.g. timed out; Tansu answers a commit fenced after its record was sent
            # so): initialising again completes our transaction if its commit was recorded, else aborts it.
            self._drop_producer()
            self._init()
        # Applied anyway: committed after all, or sent before it was aborted and shown to readers
        # (Tansu), who all apply it. The caller is told what the readers see.
        if _was_applied(record, self._read_through(topic)):
            return record
        if abortable:
            raise exc
        raise WriteConflict(
            f"control write for {self.app} revision {record.revision} lost: "
            + ("another writer of the app initialised first" if _fenced(err) else "its commit failed")
            + f" ({err.name()})"
        ) from exc

    def _drop_producer(self) -> None:
        """Let go of a producer that was fenced or is initialised again: its record purged (never sent
        later), then closed in the background. Left to the garbage collector, one kept retrying its fenced
        commit for as long as something referred to it (an exception's traceback): a burst of writers
        fencing each other left dozens per process. Not closed inline: the close of one whose commit Tansu
        answers by dropping the connection waits for that commit, for good."""
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.purge(blocking=False)
            threading.Thread(
                target=_close_quietly, args=(producer,), name=f"close-control-{self.app}", daemon=True
            ).start()

    def close(self) -> None:
        """Let go of the clients (after a write in progress, if any); a later write makes new ones."""
        with self._lock:
            producer, consumer, self._producer, self._consumer = self._producer, self._consumer, None, None
        if consumer is not None:
            consumer.close()
        if producer is not None:
            producer.close()  # nothing is in flight: writes hold the lock until committed or aborted

    def _read_through(self, topic: str) -> AppLog:
        """The app's records to the topic's end, past open control transactions (the producer may be
        initialised again on the way; a read after the last initialisation is what is returned)."""
        try:
            return self._read(topic, held_s=OPEN_TRANSACTION_WAIT_S)
        except HeldBack:
            # Held back longer than a commit takes by an open control transaction: maybe that of a
            # writer of this app that died inside its commit (Tansu never aborts it, Apache Kafka
            # after its timeout). Initialising again aborts it; another app's is waited for.
            self._drop_producer()
            self._init()
        try:
            return self._read(topic, held_s=OPEN_TRANSACTION_WAIT_S)
        except HeldBack as held:
            # Still held: another app's writer died inside its commit, or (Tansu) a transaction of this
            # app was left open with no coordinator state, which initialising does not end. On Tansu
            # nothing else would ever end it, and every app's control writes and reads would wait on
            # it. Ending it fences us too: initialise again after.
            end_open_transactions(self.bootstrap, topic, held.stable, held.end)
            self._drop_producer()
            self._init()
        return self._read(topic)

    def _read(self, topic: str, held_s: float | None = None) -> AppLog:
        wait = fetch_wait_ms(self.bootstrap, topic, FETCH_WAIT_MS)
        if self._consumer is not None and self._consumer_wait != wait:
            self._consumer.close()
            self._consumer = None
        if self._consumer is None:
            self._consumer, self._consumer_wait = _consumer(self.bootstrap, wait), wait
        since = self._read_points.pop(topic, None)  # put back by a read that reached its end
        try:
            log = read_records(
                self._consumer,
                topic,
                self.app,
                WRITE_TIMEOUT_S,
                held_s,
                reopen=lambda: self._reopen_longer(topic),
                since=since,
            )
        except HeldBack:
            if since is not None:
                self._read_points[topic] = since  # still a point the next read may resume at
            raise
        except BaseException:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None
            raise
        if log.point is not None:
            self._read_points[topic] = log.point
        return log

    def _reopen_longer(self, topic: str):
        """A consumer with a longer fetch wait in place of one whose fetches come back empty; None if it had the longest."""
        reopened = reopen_longer(
            self._consumer, lambda w: _consumer(self.bootstrap, w), self.bootstrap, [topic], self._consumer_wait
        )
        if reopened is None:
            return None
        self._consumer, self._consumer_wait = reopened
        return self._consumer


# A dropped producer was fenced or is being replaced: that its close could not abort is expected. (A
# filter for this message, set once: catch_warnings is not thread safe.)
warnings.filterwarnings("ignore", message="Producer abort_transaction failed during close", category=RuntimeWarning)


def _close_quietly(producer) -> None:
    try:
        producer.close()
    except Exception as exc:  # noqa: BLE001 - a fenced client may refuse; it is dropped either way
        log.debug("closing a dropped control producer: %s", exc)


def _follows(applied: ControlRecord | None, record: ControlRecord) -> bool:
    """Readers would apply `record` right after `applied` (apply_records' rule)."""
    return applied is None or record.revision == applied.revision + 1


def _was_applied(record: ControlRecord, log: AppLog) -> bool:
    """Readers applied `record` when they reached it in `log` (the app's, in log order)."""
    current = log.base
    for rec in log.records:
        applied = apply_records(current, [rec])
        if rec == record:
            return applied is rec
        current = applied
    return False


def _consumer(bootstrap: str, fetch_wait: int = FETCH_WAIT_MS):
    from confluent_kafka import Consumer

    return Consumer(
        kafka_config(
            bootstrap,
            {
                "group.id": f"baton-control-{uuid.uuid4().hex[:8]}",  # assign only: no group
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": fetch_wait,
            },
        )
    )


class HeldBack(TimeoutError):
    """An open transaction held a read back for longer than it was asked to wait: the read committed
    end (`stable`, the last stable offset) stayed below `end` (the high watermark)."""

    def __init__(self, message: str, stable: int, end: int):
        super().__init__(message)
        self.stable, self.end = stable, end


# The key of the record an ending abort writes (never an app's: app names have no dot). On Apache Kafka
# it is aborted, so invisible; Tansu shows it to readers, who skip it as no app's record.
ABORT_MARKER_KEY = b"baton.abort"


def end_open_transactions(
    bootstrap: str, topic: str, stable: int, end: int, timeout_s: float = WRITE_TIMEOUT_S
) -> list[str]:
    """End the control transactions open between `stable` and `end`: for each app whose records lie
    there (read uncommitted), its transactional.id is initialised (which aborts an open transaction of a
    writer that died inside its commit, and fences a live one: it re-reads and retries, WriteConflict),
    then a transaction of its own is aborted on the topic's partition. That abort's marker also ends a
    transaction Tansu left open there without coordinator state (initialising alone does not).
    Returns the apps."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

    c = Consumer(
        kafka_config(
            bootstrap,
            {
                "group.id": f"baton-control-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_uncommitted",
                "enable.partition.eof": True,
            },
        )
    )
    apps: set[str] = set()
    try:
        c.assign([TopicPartition(topic, 0, stable)])
        deadline = time.monotonic() + timeout_s
        reached = stable
        while reached < end and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.05):
                err, key = m.error(), m.key()
                if err is None:
                    reached = offset_of(m) + 1
                    if key and key != ABORT_MARKER_KEY:
                        apps.add(key.decode(errors="replace"))
                elif err.code() == KafkaError._PARTITION_EOF:
                    reached = max(reached, offset_of(m))
    finally:
        c.close()
    for app in sorted(apps):
        p = Producer(kafka_config(bootstrap, {"transactional.id": control_transactional_id(app), "linger.ms": 0}))
        try:
            p.list_topics(timeout=timeout_s)
            with txn_window(bootstrap, control_transactional_id(app)):
                p.init_transactions(timeout_s)
                p.begin_transaction()
                p.produce(topic, b"", ABORT_MARKER_KEY)
                p.flush(timeout_s)  # at the partition, so the abort writes its marker there
                p.abort_transaction(timeout_s)
        except KafkaException as exc:
            if not _fenced(exc.args[0]):
                raise
            # A writer of the app initialised meanwhile: that ended the transactions open before it
            # (ours among them); a transaction of its own is its to commit.
            log.info("ending open control transactions of %s: fenced by a writer of the app (%s)", app, exc)
        finally:
            p.flush(1)
    return sorted(apps)


@dataclass(frozen=True)
class ReadPoint:
    """Where a read of the control topic stopped: the last message it was given (any app's) and the app's
    state applied up to it. A later read resumes there, instead of reading the topic from its start again
    (which on Tansu, that never compacts, cost ~0.35 s at 8,000 offsets, twice per write)."""

    offset: int
    key: bytes | None
    value: bytes | None
    applied: ControlRecord | None


@dataclass
class AppLog:
    """The control records of one app as a read found them: `base`, the state applied before `records`
    (None: the read started at the topic's start), then `records` in log order."""

    base: ControlRecord | None
    records: list[ControlRecord]
    point: ReadPoint | None  # where the read stopped (None: it was given no message)

    def applied(self) -> ControlRecord | None:
        return apply_records(self.base, self.records)


def read_records(
    consumer,
    topic: str,
    app: str,
    timeout_s: float = WRITE_TIMEOUT_S,
    held_s: float | None = None,
    reopen=None,
    since: ReadPoint | None = None,
) -> AppLog:
    """The control records of `app` in log order: `topic` read committed from its start to at least the
    high watermark seen at the first end. A read_committed reader's end is the last stable offset: an
    open control transaction (any app's) hides the records after it, which may include a record of
    `app` committed since; so the read waits for that transaction to end (its commit's ms, or its abort
    when its writer died), for `held_s` at most (then HeldBack). `consumer` is read_committed with
    partition EOF events; it is unassigned after. A read with no end yet after STALL_S goes on through
    `reopen()`: it closes `consumer` and returns one with a longer fetch wait (or None: go on as it is).

    With `since` (a previous read's point) the read starts at that message instead of the topic's start,
    if the same message is still there (the log is append-only; what compaction removes before it does
    not change the state applied up to it); else (a topic recreated, a broker that lost its data, the
    message compacted away) it reads from the start."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    tp = TopicPartition(topic, 0)
    low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
    if since is not None and not low <= since.offset < high:
        since = None  # never fetch beyond the end: Tansu answers that with nothing at all
    position = since.offset if since is not None else low
    consumer.assign([TopicPartition(topic, 0, position)])
    try:
        log = AppLog(since.applied if since is not None else None, [], None)
        target = held_since = None
        stable = low
        watch = StallWatch()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (
                held_since is not None
                and held_s is not None
                and target is not None
                and time.monotonic() - held_since > held_s
            ):
                raise HeldBack(
                    f"{topic}: read committed held back at an open transaction before offset {target} for {held_s}s",
                    stable,
                    target,
                )
            for m in consumer.consume(10_000, 0.002):
                err = m.error()
                if err is None:
                    position = m.offset() + 1
                    if log.point is None and since is not None:  # a resumed read's first message
                        if (m.offset(), m.key(), m.value()) != (since.offset, since.key, since.value):
                            raise _ResumeRefused()
                        log.point = since  # already folded into log.base
                        continue
                    if (rec := decode_for_app(app, m.key(), m.value())) is not None:
                        log.records.append(rec)
                    log.point = ReadPoint(m.offset(), m.key(), m.value(), None)  # applied: set at the end
                    continue
                if err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(err)
                if log.point is None and since is not None:  # an end before the message it resumes at
                    raise _ResumeRefused()
                stable = max(stable, m.offset())
                if target is None:
                    # The fetch that found this end carried the high watermark (cached): read_committed,
                    # the end is the last stable offset, below it while a transaction is open.
                    target = consumer.get_watermark_offsets(tp, cached=True)[1]
                    held_since = time.monotonic()
                if m.offset() >= target:
                    if log.point is not None and log.point is not since:
                        log.point = dataclasses.replace(log.point, applied=log.applied())
                    return log
            if target is None and reopen is not None and watch.stalled() and short_wait(consumer, topic, 0, position):
                # No end yet after STALL_S: Tansu's (nearly) empty answers to a fetch wait too short for this
                # topic (after the first end, what holds the read back is an open transaction: held_s).
                if (longer := reopen()) is not None:  # the stalled one is closed
                    consumer = longer
                    consumer.assign([TopicPartition(topic, 0, position)])
        raise TimeoutError(
            f"{topic}: not read committed to offset {target} within {timeout_s}s "
            f"(at offset {position}; a control transaction left open by a writer that died?)"
        )
    except _ResumeRefused:  # the read from the start assigns anew
        return read_records(consumer, topic, app, timeout_s, held_s, reopen, since=None)
    finally:
        consumer.unassign()


class _ResumeRefused(Exception):
    """The message a read was to resume at is not there: read from the start."""


# One writer per (process, bootstrap, app): initialising costs a round trip to the transaction
# coordinator (tens of ms; seconds on a cluster's first use), a warm write only its read, commit and
# read-back. Keyed by app, not topic: a transactional.id fences across topics, so two writers of one app
# in a process (two control topics, in tests) would otherwise fence each other on every write.
# At most CACHED_WRITERS, the least recently used closed beyond: each holds two clients (threads,
# connections), and a long-lived process (the triggerer, a test session) writes for many apps.
CACHED_WRITERS = 16
_writers: OrderedDict[tuple[str, str], ControlWriter] = OrderedDict()
_writers_lock = threading.Lock()
# A forked child must not use its parent's clients (librdkafka's threads do not survive fork), nor
# destroy them while it runs: they are kept here, unused.
_inherited: list[ControlWriter] = []


def _writer(bootstrap: str, app: str) -> ControlWriter:
    evicted = []
    with _writers_lock:
        w = _writers.get((bootstrap, app))
        if w is None:
            w = _writers[(bootstrap, app)] = ControlWriter(bootstrap, app)
        _writers.move_to_end((bootstrap, app))
        while len(_writers) > CACHED_WRITERS:
            evicted.append(_writers.popitem(last=False)[1])
    for old in evicted:  # outside the cache's lock: a write of that app may be finishing
        old.close()
    return w


def close_writers(bootstrap: str) -> None:
    """Close this process's cached control writers of `bootstrap`: before that broker goes away for
    good, so their clients do not retry it for the rest of the process."""
    with _writers_lock:
        keys = [k for k in _writers if k[0] == bootstrap]
        closing = [_writers.pop(k) for k in keys]
    for w in closing:
        w.close()


def _forget_writers_after_fork() -> None:
    global _writers_lock
    _inherited.extend(_writers.values())
    _writers.clear()
    _writers_lock = threading.Lock()  # it may have been held by another thread of the parent


os.register_at_fork(after_in_child=_forget_writers_after_fork)
