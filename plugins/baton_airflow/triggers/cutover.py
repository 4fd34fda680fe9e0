"""The handoff's cutover: wait at the fence and, the moment the gate is met, write the cutover from the
triggerer (baton.fence_gate.FenceGate).

Why the write happens here and not in the task that resumes: the output stops when the active stands at
the fence F; a task started after the gate would add its start-up (seconds) to that stop.

Why a second run is safe. Airflow may run this trigger twice: a triggerer that dies after the write but
before the event is stored has the trigger re-created on another triggerer, from the same serialised
arguments; the task may also be retried. Every run is a compare-and-set on the control log, never a
blind write:
- a run that finds the standby already active at epoch + 1 reports met without writing (the first run
  did it);
- the write itself (baton.handoff.cut_over) applies only at the planned epoch with the fence still set,
  so a run that lost the race to another writer (an abort that lifted the fence, a failover that moved
  the epoch) gets a HandoffError and fails with its reason instead of overwriting it;
- two runs that race each other both read epoch E; the compare-and-set lets one write E + 1, the other
  re-reads, finds the cutover done, and reports met.
So the role moves exactly once, at the fence, whichever run writes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from baton.conditions import Check
from baton_airflow.triggers.base import SlotWaitTrigger, positions, positions_arg, run_writer
from baton_airflow.triggers.status import slot_history

if TYPE_CHECKING:
    from baton.fence_gate import FenceGate


class CutoverTrigger(SlotWaitTrigger):
    """`slot` (the standby) takes over at `epoch` + 1 once the active's output stands exactly at `fence`
    and the standby is at most `trail_records` short of it; `correct`: with corrected output. Control
    writes are by `writer` (the deferring task's run)."""

    kind = "cutover"

    def __init__(
        self,
        *,
        fence: dict[Any, int],
        epoch: int,
        trail_records: int = 0,
        correct: bool = False,
        writer: str | None = None,
        **common: Any,
    ):
        super().__init__(**common)
        self.fence, self.epoch = positions(fence), int(epoch)
        self.trail_records, self.correct, self.writer = int(trail_records), bool(correct), run_writer(writer)
        self.gate: FenceGate | None = None  # made at the first check (in the triggerer)

    def args(self) -> dict[str, Any]:
        return dict(
            fence=positions_arg(self.fence),
            epoch=self.epoch,
            trail_records=self.trail_records,
            correct=self.correct,
            writer=self.writer,
        )

    def check(self) -> Check:
        if self.gate is None:  # one gate for this trigger's life: it keeps the active's word once it came
            self.gate = self.new_gate()
        return self.gate.look()

    def new_gate(self):
        from baton.apps import load_app
        from baton.control_plane import ControlPlane, KafkaControlStore
        from baton.fence_gate import FenceGate
        from baton.handoff import other
        from baton.kafka.markers import read_last_marker
        from baton.records import Slot

        commits_topic = load_app(self.app).commits_topic
        to = Slot(self.slot)
        return FenceGate(
            ControlPlane(KafkaControlStore(self.bootstrap), writer=self.writer),
            self.app,
            to,
            self.epoch,
            self.fence,
            lambda: read_last_marker(self.bootstrap, commits_topic, self.app),
            lambda: slot_history(self.bootstrap, self.app, other(to).value, last_n=500),
            lambda: slot_history(self.bootstrap, self.app, self.slot, last_n=500),
            trail_records=self.trail_records,
            correct=self.correct,
        )
