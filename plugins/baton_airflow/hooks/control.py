"""The control plane's Kafka I/O: the control topic (compare-and-set writes through
baton.control_plane), the status topic, commit markers and input positions.

Connection settings come from BatonKafkaHook (argument > connection `baton_kafka` > environment).
"""

from __future__ import annotations

from airflow.sdk import BaseHook

from baton.apps import AppDefinition
from baton.control_plane import ControlPlane, KafkaControlStore
from baton.kafka.tail import end_offsets, read_tail
from baton.leases import LOOK_BACK_RECORDS, Lease, decode_lease
from baton.records import CommitMarker, RecordError, Slot, StatusRecord
from baton.settings import LEASES_TOPIC, STATUS_TOPIC
from baton_airflow.hooks.kafka import BatonKafkaHook


def read_slot_status(
    bootstrap: str, app: str, slot: Slot | str | None = None, last_n: int = 5000
) -> list[StatusRecord]:
    """Status records of `app` (one slot, or all) among the last `last_n` of the status topic, oldest first."""
    prefix = f"{app}/".encode()
    key = f"{app}/{Slot(slot).value}".encode() if slot is not None else None

    def keep(m):
        k = m.key() or b""
        if (key is not None and k != key) or (key is None and not k.startswith(prefix)):
            return None
        try:
            return StatusRecord.from_bytes(m.value())
        except RecordError:
            return None  # a malformed status record is skipped, never fatal

    return read_tail(bootstrap, STATUS_TOPIC, keep, last_n=last_n)


def read_last_commit(bootstrap: str, app: AppDefinition) -> CommitMarker | None:
    from baton.kafka.markers import read_last_marker

    return read_last_marker(bootstrap, app.commits_topic, app.name)


def read_leases(bootstrap: str, app: str, last_n: int = LOOK_BACK_RECORDS) -> dict[Slot, Lease]:
    """The newest lease of each of `app`'s slots among the last `last_n` renewals of every app (one
    per slot and second: the last few seconds are what liveness needs). A missing topic: none yet."""
    from confluent_kafka import KafkaException

    try:
        leases = read_tail(bootstrap, LEASES_TOPIC, lambda m: decode_lease(app, m.key(), m.value()), last_n=last_n)
    except KafkaException:
        return {}
    return {lease.slot: lease for lease in leases}


def current_run_writer() -> str:
    """ "<dag_id>:<run_id>" of the task running this (the Baton page links a control change to its run),
    or "airflow" outside a task."""
    from airflow.sdk import get_current_context

    try:
        ctx = get_current_context()
        return f"{ctx['dag'].dag_id}:{ctx['run_id']}"
    except Exception:  # no task context (a test, a shell): the writer is still named
        return "airflow"


class BatonControlHook(BaseHook):
    hook_name = "Baton control plane"

    def __init__(self, kafka_conn_id: str = BatonKafkaHook.default_conn_name, writer: str | None = None):
        super().__init__()
        self.kafka = BatonKafkaHook(kafka_conn_id)
        self.writer = writer or current_run_writer()

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap

    def plane(self) -> ControlPlane:
        return ControlPlane(KafkaControlStore(self.bootstrap), writer=self.writer)

    def status(self, app: str, slot: Slot | str | None = None, last_n: int = 5000) -> list[StatusRecord]:
        return read_slot_status(self.bootstrap, app, slot, last_n)

    def leases(self, app: str) -> dict[Slot, Lease]:
        return read_leases(self.bootstrap, app)

    def last_commit(self, app: AppDefinition) -> CommitMarker | None:
        return read_last_commit(self.bootstrap, app)

    def input_end(self, app: AppDefinition) -> dict[int, int]:
        return end_offsets(self.bootstrap, app.input.topic, range(app.input.partitions))
