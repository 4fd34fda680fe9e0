"""The control plane's writes: intent recorded before acting, compare-and-set, idempotent re-runs,
stale writers refused, illegal lifecycle moves named."""

import dataclasses

import pytest

from baton.control_plane import ControlPlane, SlotMoved, StaleEpoch
from baton.lifecycle import IllegalTransition
from baton.records import Slot, SlotState
from tests.support.fakes import MemoryControlStore


class Clock:
    def __init__(self, t=1_000.0):
        self.t = t

    def __call__(self):
        return self.t


@pytest.fixture
def plane():
    return ControlPlane(MemoryControlStore(), writer="test", clock=Clock())


def test_first_start_creates_the_app_at_epoch_1_with_blue_active(plane):
    rec = plane.move_slot("app", Slot.GREEN, SlotState.STARTING, version="v1")
    assert (rec.revision, rec.epoch, rec.active) == (1, 1, Slot.BLUE)
    spec = rec.slots[Slot.GREEN]
    assert (spec.desired, spec.version, spec.started_ms) == (SlotState.STARTING, "v1", 1_000_000)
    assert rec.writer == "test" and rec.ts_ms == 1_000_000


def test_repeating_a_step_writes_nothing(plane):
    first = plane.move_slot("app", Slot.BLUE, SlotState.STARTING, version="v1")
    plane.clock.t += 60
    again = plane.move_slot("app", Slot.BLUE, SlotState.STARTING, version="v1")
    assert again == first
    assert len(plane.store.log) == 1


def test_the_lifecycle_is_walked_in_order_and_an_illegal_move_is_refused(plane):
    for state in (SlotState.STARTING, SlotState.RUNNING, SlotState.STOPPING, SlotState.STOPPED):
        rec = plane.move_slot("app", Slot.BLUE, state)
    assert rec.revision == 4 and rec.slots[Slot.BLUE].desired is SlotState.STOPPED
    with pytest.raises(IllegalTransition, match="from stopped to running"):
        plane.move_slot("app", Slot.BLUE, SlotState.RUNNING)
    assert plane.current("app") == rec  # nothing was written


def test_a_concurrent_writer_wins_and_the_change_is_reapplied_on_its_state(plane):
    plane.move_slot("app", Slot.BLUE, SlotState.STARTING)

    def other_writer():  # lands between our read and our write
        cur = plane.store.read("app")
        plane.store.log.append(dataclasses.replace(cur, revision=cur.revision + 1, active=Slot.GREEN))

    plane.store.before_append = other_writer
    rec = plane.move_slot("app", Slot.GREEN, SlotState.STARTING)
    assert rec.revision == 3
    assert rec.active is Slot.GREEN  # the other write was kept, ours applied on top
    assert rec.slots[Slot.GREEN].desired is SlotState.STARTING and rec.slots[Slot.BLUE].desired is SlotState.STARTING


def test_a_writer_that_acted_on_an_old_epoch_is_refused(plane):
    plane.move_slot("app", Slot.BLUE, SlotState.STARTING)
    cur = plane.current("app")
    plane.store.log.append(dataclasses.replace(cur, revision=cur.revision + 1, epoch=2, active=Slot.GREEN))
    with pytest.raises(StaleEpoch, match="epoch is 2"):
        plane.move_slot("app", Slot.BLUE, SlotState.STOPPING, expected_epoch=1)
    assert plane.current("app").slots[Slot.BLUE].desired is SlotState.STARTING


def test_a_restart_keeps_the_start_time_of_the_launch_it_records(plane):
    plane.move_slot("app", Slot.BLUE, SlotState.STARTING)
    plane.move_slot("app", Slot.BLUE, SlotState.RUNNING)
    plane.clock.t = 2_000.0
    rec = plane.move_slot("app", Slot.BLUE, SlotState.STARTING, restarts=(2_000_000,))
    assert rec.slots[Slot.BLUE].started_ms == 2_000_000 and rec.slots[Slot.BLUE].restarts == (2_000_000,)
    # The record survives the wire format with the guard's fields.
    from baton.records import ControlRecord

    assert ControlRecord.from_bytes(rec.to_bytes()) == rec


def test_a_move_conditioned_on_the_spec_read_is_refused_once_another_step_moved_the_slot(plane):
    read = plane.move_slot("app", Slot.GREEN, SlotState.STARTING, version="v3").slots[Slot.GREEN]
    # Another run's step (an abort putting the standby back on v1) moves the slot after it was read.
    plane.move_slot("app", Slot.GREEN, SlotState.STOPPING, reason="put back")
    plane.move_slot("app", Slot.GREEN, SlotState.STOPPED, reason="put back")
    put_back = plane.move_slot("app", Slot.GREEN, SlotState.STARTING, version="v1", reason="put back")

    with pytest.raises(SlotMoved, match="app/green is starting on v1"):
        plane.move_slot("app", Slot.GREEN, SlotState.STARTING, reason="restarted", restarts=(5,), if_unchanged=read)
    assert plane.current("app") == put_back

    moved = plane.move_slot(
        "app",
        Slot.GREEN,
        SlotState.STARTING,
        reason="restarted",
        restarts=(5,),
        if_unchanged=put_back.slots[Slot.GREEN],
    )  # unchanged since read: done
    assert moved.slots[Slot.GREEN].restarts == (5,) and moved.slots[Slot.GREEN].version == "v1"
