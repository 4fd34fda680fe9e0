"""The control plane's writes to the control topic: read the applied state, change it, write it with
revision + 1, confirm. Shared by every Airflow operator (through BatonControlHook) and by tests.

Every write is a compare-and-set (baton.kafka.control_log): a concurrent or repeated writer loses and
re-reads, so a change is applied once. A caller that acted on a given epoch passes `expected_epoch`:
if a cutover bumped the epoch meanwhile, its write is refused (StaleEpoch) instead of undoing it.
Changes are pure functions of the current record, so a retried task recomputes and converges.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Protocol

from baton.kafka.control_log import WriteConflict
from baton.lifecycle import check_transition
from baton.records import ControlRecord, Slot, SlotSpec, SlotState


class ControlStore(Protocol):
    def read(self, app: str) -> ControlRecord | None: ...

    def append(self, record: ControlRecord) -> ControlRecord:
        """Write and confirm; WriteConflict if another record won the revision."""


class KafkaControlStore:
    def __init__(self, bootstrap: str, topic: str | None = None):
        self.bootstrap, self.topic = bootstrap, topic

    def read(self, app: str) -> ControlRecord | None:
        from baton.kafka.control_log import read_control

        return read_control(self.bootstrap, app, self.topic)

    def append(self, record: ControlRecord) -> ControlRecord:
        from baton.kafka.control_log import write_control

        return write_control(self.bootstrap, record, self.topic)


class StaleEpoch(RuntimeError):
    """The app's epoch moved on (a cutover happened) since the caller decided: re-plan."""


class SlotMoved(RuntimeError):
    """The slot's spec is no longer the one the caller decided on (another run's step moved it)."""


class NoControlRecord(LookupError):
    """The app has no control record: it was never started."""


Change = Callable[[ControlRecord], ControlRecord]


class ControlPlane:
    def __init__(self, store: ControlStore, writer: str = "airflow", clock: Callable[[], float] = time.time):
        self.store, self.writer, self.clock = store, writer, clock

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def current(self, app: str) -> ControlRecord | None:
        return self.store.read(app)

    def require(self, app: str) -> ControlRecord:
        """The current record of an app that must have one (a step after its start)."""
        rec = self.current(app)
        if rec is None:
            raise NoControlRecord(f"{app} has no control record: it was never started")
        return rec

    def update(self, app: str, change: Change, expected_epoch: int | None = None, attempts: int = 5) -> ControlRecord:
        """Apply `change` to the current record (a new app starts at epoch 1, blue active) and write it.

        No write happens when the change leaves the record as it is (idempotent re-runs)."""
        for _ in range(attempts):
            current = self.store.read(app)
            base = current or ControlRecord(app=app, revision=0, epoch=1, active=Slot.BLUE)
            if expected_epoch is not None and base.epoch != expected_epoch:
                raise StaleEpoch(f"{app}: epoch is {base.epoch}, the caller acted on epoch {expected_epoch}")
            changed = change(base)
            if current is not None and _same(changed, current):
                return current
            record = dataclasses.replace(changed, revision=base.revision + 1, writer=self.writer, ts_ms=self.now_ms())
            try:
                return self.store.append(record)
            except WriteConflict:
                continue  # somebody else wrote first: re-read and decide again
        raise WriteConflict(f"{app}: control record changed under us {attempts} times; giving up")

    def move_slot(
        self,
        app: str,
        slot: Slot,
        target: SlotState,
        *,
        version: str | None = None,
        reason: str = "",
        expected_epoch: int | None = None,
        if_unchanged: SlotSpec | None = None,
        **spec_fields,
    ) -> ControlRecord:
        """Record the slot's next lifecycle state (intent, before acting); IllegalTransition if not allowed.
        `if_unchanged`: the spec the caller decided on; SlotMoved if the slot's is another by now (a
        repair must not act on a slot a DAG's step moved meanwhile)."""
        now = self.now_ms()

        def change(rec: ControlRecord) -> ControlRecord:
            spec = rec.slots.get(slot, SlotSpec())
            if if_unchanged is not None and spec != if_unchanged:
                raise SlotMoved(
                    f"{app}/{slot.value} is {spec.desired.value} on {spec.version or '-'} since "
                    f"{spec.started_ms or '-'} ({spec.reason or 'no reason'}), no longer as it was read"
                )
            check_transition(spec.desired, target)
            if (
                spec.desired is target
                and (version is None or version == spec.version)
                and not spec_fields
                and reason == spec.reason
            ):
                return rec  # already so: a retried step writes nothing
            updates = dict(desired=target, reason=reason, **spec_fields)
            if version is not None:
                updates["version"] = version
            if target is SlotState.STARTING and spec.desired is not SlotState.STARTING:
                updates.setdefault("started_ms", now)
            return dataclasses.replace(rec, slots={**rec.slots, slot: dataclasses.replace(spec, **updates)})

        return self.update(app, change, expected_epoch)


def _same(a: ControlRecord, b: ControlRecord) -> bool:
    """Equal apart from the bookkeeping a write adds."""
    strip: dict[str, Any] = dict(revision=0, writer="", ts_ms=0)
    return dataclasses.replace(a, **strip) == dataclasses.replace(b, **strip)
