"""The handoff's gate at its fence F, and its cutover the moment the gate is met (steps 2 and 3 of
baton.handoff).

Whoever waits at the fence writes the cutover itself, so nothing starts between the active stopping at
F (the output stops) and the write that lets the new active emit.

What the gate needs of the active, in this order:
1. its word that it holds at F (StatusRecord.held_fence, for this handoff): its source plans under the
   fence's cap, and nothing it planned before is still in flight (spark_apps.runtime.coordination.applied_cap);
2. then a commit marker that shows it emitted exactly F.
A marker alone says where the active stands, not that it stays there. Seen in CI: a fence planned in an
input pause lies at the input's end, where the idle active's marker already stood; the cutover was
written on that marker, input resumed before the fence reached the active's source, and the old active
emitted past F at its epoch after the role had moved (the new active stopped at a ReplayConflict). Read
in this order, a marker at F is where the active stays until the new active emits.

Reads (each waits out a fetch, ~50 ms on the embedded broker): the record once, to learn whose fence F
is; the active's status at each look until its word came (it holds for the fence's life), then the
marker alone while it shows the active short of F at the epoch (the gate cannot be met then, and no
cutover can have been written). In a handoff under load the word comes within a batch of the fence, long
before the active reaches F, so the look that finds it at F reads nothing more before the write: the
time between the active reaching F and the write is part of the handoff's output gap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from baton.conditions import WAIT, Check
from baton.handoff import HandoffError, cut_over, fence_reached, short_of
from baton.records import CommitMarker, ControlRecord, Positions, Slot, StatusRecord


def holds_fence(active: Sequence[StatusRecord], fence: Positions, by: str) -> bool:
    """The active said it holds at handoff `by`'s fence `fence`: from that word on it emits nothing past
    it at the handoff's epoch (spark_apps.runtime.coordination.applied_cap)."""
    want = dict(fence)
    return any(s.held_for == by and s.held_fence is not None and dict(s.held_fence) == want for s in active)


def fence_owner(rec: ControlRecord | None, fence: Positions, epoch: int) -> str | None:
    """The id of the handoff whose fence `fence` stands on `rec` at `epoch` (None: it does not)."""
    if rec is None or rec.epoch != epoch or rec.fence is None or dict(rec.fence) != dict(fence):
        return None
    return rec.handoff.id if rec.handoff is not None else None


class FenceGate:
    """`to` takes over at `epoch` + 1 once the active (the other slot) holds at `fence`, has emitted
    exactly it, and `to` is at most `trail_records` short of it (baton.handoff.fence_reached); `correct`:
    with corrected output. look() answers met (the cutover is written, now or before: a re-run finds it),
    failed (the gate failed, or the record moved on), or WAIT. `plane` is a
    baton.control_plane.ControlPlane; one gate serves one fence (it keeps what it learnt)."""

    def __init__(
        self,
        plane,
        app: str,
        to: Slot,
        epoch: int,
        fence: Positions,
        read_marker: Callable[[], CommitMarker | None],
        read_active: Callable[[], Sequence[StatusRecord]],
        read_standby: Callable[[], Sequence[StatusRecord]],
        trail_records: int = 0,
        correct: bool = False,
    ):
        self.plane, self.app, self.to, self.epoch, self.fence = plane, app, to, epoch, dict(fence)
        self.read_marker, self.read_active, self.read_standby = read_marker, read_active, read_standby
        self.trail_records, self.correct = trail_records, correct
        self.by: str | None = None  # whose fence it is (the record's handoff id), read once
        self.held = False  # the active's word that it holds at the fence came

    def look(self) -> Check:
        if self.by is None:
            rec = self.plane.current(self.app)
            if self._done(rec):
                return Check(met=True, message=f"{self.to.value} is active at epoch {rec.epoch}")
            self.by = fence_owner(rec, self.fence, self.epoch)
            if self.by is None:
                return Check(failed=True, message=self._moved_on(rec))
        if not self.held:
            self.held = holds_fence(self.read_active(), self.fence, self.by)
        marker = self.read_marker()  # after the word: a marker at F is then where the active stays
        if short_of(marker, self.fence, self.epoch):
            return WAIT
        rec = self.plane.current(self.app)
        if self._done(rec):
            return Check(met=True, message=f"{self.to.value} is active at epoch {rec.epoch}")
        check = fence_reached(
            marker,
            self.read_standby(),
            self.fence,
            self.epoch,
            active_holds=self.held,
            trail_records=self.trail_records,
        )
        if not check.met:
            return check
        try:
            rec = self.plane.update(self.app, cut_over(self.to, self.epoch, correct=self.correct, fence=self.fence))
        except HandoffError as exc:
            return Check(failed=True, message=str(exc))
        return Check(met=True, message=f"{check.message}; cut over: {self.to.value} is active at epoch {rec.epoch}")

    def _done(self, rec: ControlRecord | None) -> bool:
        return rec is not None and rec.active is self.to and rec.epoch == self.epoch + 1

    def _moved_on(self, rec: ControlRecord | None) -> str:
        """Why no cutover can be written at this gate's fence any more (cut_over's own refusal)."""
        if rec is None:
            return f"{self.app}: no control record: nothing to cut over"
        try:
            cut_over(self.to, self.epoch, fence=self.fence)(rec)
        except HandoffError as exc:
            return str(exc)
        return f"{self.app}: the fence {self.fence} at epoch {self.epoch} names no handoff"
