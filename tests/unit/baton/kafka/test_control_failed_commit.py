"""What a control write whose commit failed tells its caller: fenced (another writer initialised) is a
WriteConflict to decide again on, however librdkafka words it; nothing else is hidden."""

import pytest
from confluent_kafka import KafkaError, KafkaException

from baton.kafka.control_log import AppLog, ControlWriter, WriteConflict
from baton.records import ControlRecord, Slot


class _Producer:
    """A transactional producer whose commit fails with `commit_err`; its abort with `abort_err` (if any)."""

    def __init__(self, commit_err: KafkaError, abort_err: KafkaError | None = None):
        self.commit_err, self.abort_err = commit_err, abort_err
        self.aborted = self.purged = False

    def begin_transaction(self):
        pass

    def produce(self, *args, **kwargs):
        pass

    def commit_transaction(self, timeout):
        raise KafkaException(self.commit_err)

    def abort_transaction(self, timeout):
        if self.abort_err is not None:
            raise KafkaException(self.abort_err)
        self.aborted = True

    def purge(self, blocking=True):
        self.purged = True

    def close(self):
        pass


def _invalid_txn_state() -> KafkaError:  # Apache Kafka's answer to a commit racing another writer's init
    return KafkaError(KafkaError.INVALID_TXN_STATE, "current transaction must be aborted", txn_requires_abort=True)


def _fenced() -> KafkaError:
    return KafkaError(KafkaError._FENCED, "Failed to end transaction: fenced by a newer instance", fatal=True)


def _writer(monkeypatch, producer: _Producer) -> ControlWriter:
    w = ControlWriter("b:1", "a")
    w._producer = producer
    monkeypatch.setattr(w, "_init", lambda: w._producer)
    monkeypatch.setattr(w, "_read_through", lambda topic: AppLog(None, [], None))  # nothing applied
    return w


def _record() -> ControlRecord:
    return ControlRecord(app="a", revision=1, epoch=1, active=Slot.BLUE)


def test_an_abort_fenced_after_a_failed_commit_is_a_write_conflict(monkeypatch):
    producer = _Producer(_invalid_txn_state(), abort_err=_fenced())
    w = _writer(monkeypatch, producer)
    with pytest.raises(WriteConflict, match="another writer of the app initialised first"):
        w.write(_record(), "control")
    assert w._producer is None and producer.purged  # dropped: the next write initialises again


def test_a_commit_fenced_is_a_write_conflict(monkeypatch):
    producer = _Producer(_fenced())
    w = _writer(monkeypatch, producer)
    with pytest.raises(WriteConflict):
        w.write(_record(), "control")
    assert w._producer is None


def test_a_refused_record_is_raised_after_its_transaction_is_aborted(monkeypatch):
    producer = _Producer(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large", txn_requires_abort=True))
    w = _writer(monkeypatch, producer)
    with pytest.raises(KafkaException) as raised:
        w.write(_record(), "control")
    assert raised.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert producer.aborted and w._producer is producer  # usable again


def test_an_abort_that_fails_otherwise_is_raised_and_the_producer_dropped(monkeypatch):
    producer = _Producer(_invalid_txn_state(), abort_err=KafkaError(KafkaError._TIMED_OUT, "abort timed out"))
    w = _writer(monkeypatch, producer)
    with pytest.raises(KafkaException) as raised:
        w.write(_record(), "control")
    assert raised.value.args[0].code() == KafkaError._TIMED_OUT
    assert w._producer is None
