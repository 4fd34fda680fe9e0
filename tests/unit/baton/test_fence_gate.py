"""The handoff's gate at its fence and its cutover (baton.fence_gate): the active's word that it holds
at F, read before the marker that shows it at F, then one compare-and-set write."""

import pytest

from baton.conditions import WAIT
from baton.fence_gate import FenceGate, holds_fence
from baton.handoff import HandoffError, cut_over, moved_fence, with_fence, without_fence
from baton.records import Role, Slot, SlotState, StatusRecord
from tests.unit.baton.test_handoff import F, marker, plane  # noqa: F401 (plane: the fixture)


def standby(processed, ts_ms=10**13):
    return StatusRecord(
        app="app",
        slot=Slot.GREEN,
        state=SlotState.RUNNING,
        role=Role.STANDBY,
        epoch_seen=1,
        batch_id=3,
        processed=processed,
        ts_ms=ts_ms,
    )


def active(held_fence=None, held_for=""):
    return StatusRecord(
        app="app",
        slot=Slot.BLUE,
        state=SlotState.RUNNING,
        role=Role.ACTIVE,
        epoch_seen=1,
        batch_id=3,
        held_fence=held_fence,
        held_for=held_for,
        ts_ms=10,
    )


class Reads:
    """The gate's reads, in order: r(ecord), a(ctive's status), m(arker), s(tandby's status)."""

    def __init__(self, plane):
        self.plane, self.log = plane, []
        self.emitted, self.epoch, self.processed = {0: 90, 1: 200}, 1, {0: 80, 1: 200}
        self.active = [active()]

    def current(self, app):
        self.log.append("r")
        return self.plane.current(app)

    def update(self, app, change):
        return self.plane.update(app, change)

    def gate(self, correct=False):
        return FenceGate(
            self,
            "app",
            Slot.GREEN,
            1,
            F,
            self.marker,
            self.read_active,
            self.read_standby,
            trail_records=50,
            correct=correct,
        )

    def marker(self):
        self.log.append("m")
        return marker(self.emitted, self.epoch)

    def read_active(self):
        self.log.append("a")
        return self.active

    def read_standby(self):
        self.log.append("s")
        return [standby(self.processed)]


def test_the_word_is_only_for_this_handoffs_fence():
    assert holds_fence([active(), active(F, "run1")], F, "run1")
    assert not holds_fence([active(F, "run0")], F, "run1")  # an earlier handoff's, at the same positions
    assert not holds_fence([active({0: 50, 1: 200}, "run1")], F, "run1")  # this handoff's earlier fence
    assert not holds_fence([active()], F, "run1")


def test_whoever_waits_at_the_fence_writes_the_cutover_once_the_active_holds_there_and_once(plane):
    plane.update("app", with_fence(F, epoch=1, by="run1"))
    reads = Reads(plane)
    gate = reads.gate(correct=True)
    assert gate.look() == WAIT
    assert reads.log == ["r", "a", "m"]  # whose fence (once), the active's word, then the marker: short of F
    reads.log.clear()
    # At F without its word (an active idle at the input's end that has not seen the fence): no cutover.
    reads.emitted = F
    check = gate.look()
    assert not check.met and not check.failed and "its word" in check.message
    assert reads.log == ["a", "m", "r", "s"] and plane.current("app").epoch == 1
    reads.log.clear()
    reads.active = [active(F, "run1")]
    done = gate.look()  # the word, then the marker at F, the standby 40 short: within 50
    assert reads.log == ["a", "m", "r", "s"]  # the word read before the marker that shows it at F
    assert done.met and "cut over: green is active at epoch 2" in done.message
    rec = plane.current("app")
    assert (rec.active, rec.epoch, rec.fence, rec.correct_epoch) == (Slot.GREEN, 2, None, 2)
    again = reads.gate().look()  # a re-run (a trigger re-created after a triggerer restart): done, nothing written
    assert again.met and plane.current("app").revision == rec.revision
    reads.emitted, reads.epoch = {0: 120, 1: 200}, 2
    emitting = gate.look()  # ... also once the new active emitted
    assert emitting.met and plane.current("app").revision == rec.revision


def test_once_the_word_came_a_look_short_of_the_fence_reads_the_marker_alone(plane):
    plane.update("app", with_fence(F, epoch=1, by="run1"))
    reads = Reads(plane)
    reads.active = [active(F, "run1")]
    gate = reads.gate()
    assert gate.look() == WAIT
    reads.log.clear()
    for emitted in ({0: 99, 1: 200}, {0: 99, 1: 180}, {}):  # short of F: in one, in both, in neither named
        reads.emitted = emitted
        assert gate.look() == WAIT
    assert reads.log == ["m", "m", "m"]
    reads.emitted = {0: 99, 1: 201}  # short in one, past in the other: the gate fails
    past = gate.look()
    assert past.failed and "emitted past the fence" in past.message
    reads.emitted, reads.epoch = {0: 99, 1: 200}, 0  # a marker of another epoch is never taken as short of F
    assert not gate.look().met


def test_a_cutover_at_the_fence_fails_when_the_gate_does_or_the_record_moved_on(plane):
    plane.update("app", with_fence(F, epoch=1, by="run1"))
    reads = Reads(plane)
    reads.active, reads.emitted, reads.processed = [active(F, "run1")], {0: 101, 1: 200}, F
    past = reads.gate().look()
    assert past.failed and "emitted past the fence" in past.message
    plane.update("app", moved_fence(F, {0: 300, 1: 300}, 1, "run1"))  # planned again further ahead
    reads.emitted = F
    moved = reads.gate().look()
    assert moved.failed and "the cutover was planned at {0: 100, 1: 200}" in moved.message
    plane.update("app", without_fence(1, by="run1"))  # aborted meanwhile: no fence to cut over at
    lifted = reads.gate().look()
    assert lifted.failed and "no fence is set" in lifted.message
    assert plane.current("app").epoch == 1


def test_a_cutover_write_refuses_a_fence_that_moved_since_the_gate_was_met(plane):
    plane.update("app", with_fence(F, epoch=1, by="run1"))
    plane.update("app", moved_fence(F, {0: 300, 1: 300}, 1, "run1"))
    with pytest.raises(HandoffError, match="the cutover was planned at"):
        plane.update("app", cut_over(Slot.GREEN, from_epoch=1, fence=F))
    assert plane.update("app", cut_over(Slot.GREEN, from_epoch=1, fence={0: 300, 1: 300})).epoch == 2
