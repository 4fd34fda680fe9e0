"""Reading the control topic as a compare-and-set log.

Records for one app are applied in log order; a record is applied only if its revision is exactly
one more than the last applied revision (the first applied record may have any revision, since
compaction may have removed older ones). So a stale writer (revision too low) or a duplicated
write (revision repeated) is ignored identically by every reader, and a writer knows its write won
by reading the log back. Shared by the Spark harness (follows its app) and the Airflow hooks.
"""

from __future__ import annotations

from typing import Iterable

from baton.records import ControlRecord, RecordError


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


def read_control(bootstrap: str, app: str, control_topic: str | None = None, timeout_s: float = 15.0) -> ControlRecord | None:
    """The applied control state of `app`, reading the control topic to its true end."""
    from baton.kafka.tail import read_tail
    from baton.settings import CONTROL_TOPIC

    records = read_tail(bootstrap, control_topic or CONTROL_TOPIC, lambda m: decode_for_app(app, m.key(), m.value()),
                        last_n=None, timeout_s=timeout_s)
    return apply_records(None, records)


def write_control(bootstrap: str, record: ControlRecord, control_topic: str | None = None) -> ControlRecord:
    """Append `record` (its revision must be the applied revision + 1) and confirm it was applied.

    Raises WriteConflict if another write won. Writing the same record again after a crash is
    harmless: its revision no longer follows the applied one, so readers ignore the copy.
    """
    from confluent_kafka import Producer

    from baton.settings import CONTROL_TOPIC

    topic = control_topic or CONTROL_TOPIC
    # One record per producer, so no reordering to prevent, and a duplicate from a retry repeats a
    # revision, which every reader ignores: the idempotent producer's setup (500 ms here) buys nothing.
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    p.produce(topic, record.to_bytes(), record.key())
    if p.flush(15) != 0:
        raise TimeoutError(f"control record for {record.app} not acknowledged by the broker")
    applied = read_control(bootstrap, record.app, topic)
    if applied != record:
        raise WriteConflict(
            f"control write for {record.app} revision {record.revision} lost: applied revision is "
            f"{applied.revision if applied else None}"
        )
    return applied
