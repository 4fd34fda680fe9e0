"""Fakes for unit tests only (integration tests use the real broker, Spark and Airflow)."""

from __future__ import annotations

from baton.kafka.control_log import WriteConflict, apply_records
from baton.records import ControlRecord


class MemoryControlStore:
    """The control topic as a list, read with the same compare-and-set rule as the real one."""

    def __init__(self):
        self.log: list[ControlRecord] = []
        self.before_append = None  # hook for tests: simulate a concurrent writer

    def read(self, app: str) -> ControlRecord | None:
        return apply_records(None, [r for r in self.log if r.app == app])

    def append(self, record: ControlRecord) -> ControlRecord:
        if self.before_append is not None:
            hook, self.before_append = self.before_append, None
            hook()
        self.log.append(record)
        applied = self.read(record.app)
        if applied != record:
            raise WriteConflict(f"revision {record.revision} lost")
        return applied


class PlaneControl:
    """The control hook as an operator uses it, around a ControlPlane (on a MemoryControlStore)."""

    bootstrap = "broker:9092"

    def __init__(self, plane):
        self._plane = plane

    def plane(self):
        return self._plane
