"""The handoff's steps on the control record (resumable, refused when stale) and its fence check."""

import pytest

from baton.control_plane import ControlPlane
from baton.handoff import (
    FAILOVER,
    TRAILING_STANDBY_FRESH_MS,
    HandoffError,
    ahead_s_for,
    cut_over,
    failover_fence,
    fence_passed,
    fence_reached,
    finished,
    moved_fence,
    plan_ahead,
    plan_fence,
    saw_epoch,
    stale_fence,
    taken_over_at,
    with_fence,
    without_fence,
)
from baton.invariants import ask_invariants
from baton.records import CommitMarker, Handoff, Role, Slot, SlotState, StatusRecord
from tests.support.fakes import MemoryControlStore

F = {0: 100, 1: 200}


@pytest.fixture
def plane():
    p = ControlPlane(MemoryControlStore(), writer="test")
    p.move_slot("app", Slot.BLUE, SlotState.STARTING, version="v1")
    return p


def marker(emitted, epoch=1):
    return CommitMarker(app="app", generation=0, epoch=epoch, slot=Slot.BLUE, batch_id=7, emitted=emitted)


def standby(processed, batch_id=3, epoch_seen=1, ts_ms=10, state=SlotState.RUNNING):
    return StatusRecord(
        app="app",
        slot=Slot.GREEN,
        state=state,
        role=Role.STANDBY,
        epoch_seen=epoch_seen,
        batch_id=batch_id,
        processed=processed,
        ts_ms=ts_ms,
    )


def test_the_fence_is_ahead_of_the_input_by_the_arrival_rate_and_never_behind_the_active():
    assert plan_fence({0: 1000, 1: 1000}, {0: 990, 1: 1200}, rate_per_s=2000, ahead_s=2, partitions=2) == {
        0: 3000,
        1: 3000,
    }
    assert plan_fence({0: 1000, 1: 1000}, {0: 990, 1: 1200}, rate_per_s=0, ahead_s=2, partitions=2) == {
        0: 1000,
        1: 1200,
    }


def test_a_fence_the_active_passed_moves_in_one_write_only_while_nothing_else_changed(plane):
    plane.move_slot("app", Slot.BLUE, SlotState.RUNNING)
    rec = plane.update("app", with_fence(F, epoch=1, by="run1"))
    assert fence_passed(rec, 1, F, "run1", marker({0: 101, 1: 200}))
    assert not fence_passed(rec, 1, F, "run1", marker({0: 100, 1: 200}))  # at it: the gate failed otherwise
    assert not fence_passed(rec, 1, F, "run2", marker({0: 101, 1: 200}))  # another run's fence
    assert not fence_passed(rec, 1, F, "run1", marker({0: 101, 1: 200}, epoch=2))  # a newer epoch wrote
    new = {0: 500, 1: 600}
    moved = plane.update("app", moved_fence(F, new, 1, "run1"))
    assert (moved.fence, moved.handoff.fence, moved.fence_expires_ms) == (new, new, rec.fence_expires_ms)
    assert plane.update("app", moved_fence(F, new, 1, "run1")) == moved  # a retry: done already
    with pytest.raises(HandoffError, match="no longer"):
        plane.update("app", moved_fence(F, {0: 900, 1: 900}, 1, "run1"))


def test_a_full_handoff_moves_the_role_once_and_every_step_can_be_rerun(plane):
    plane.update("app", ask_invariants("run:1"))  # asked of the standby: the role change ends the request
    fenced = plane.update("app", with_fence(F, epoch=1))
    assert fenced.fence == F and fenced.epoch == 1
    assert plane.update("app", with_fence(F, epoch=1)).revision == fenced.revision  # a retry writes nothing

    cut = plane.update("app", cut_over(Slot.GREEN, from_epoch=1))
    assert (cut.active, cut.epoch, cut.fence) == (Slot.GREEN, 2, None)  # one write: writer moved, fence lifted
    assert cut.invariants_asked == ""
    again = plane.update("app", cut_over(Slot.GREEN, from_epoch=1))
    assert (again.epoch, again.revision) == (2, cut.revision)  # no double epoch bump
    assert plane.update("app", without_fence(epoch=2)).revision == cut.revision


def test_stale_or_conflicting_steps_are_refused(plane):
    plane.update("app", with_fence(F, epoch=1, by="run1"))
    with pytest.raises(HandoffError, match="already set by run1"):
        plane.update("app", with_fence({0: 1, 1: 1}, epoch=1, by="run2"))
    assert plane.update("app", with_fence({0: 1, 1: 1}, epoch=1, by="run1")).fence == F  # a retry keeps its fence
    with pytest.raises(HandoffError, match="set by run1 handoff, not run2"):
        plane.update("app", without_fence(1, by="run2"))  # another run's abort must not lift it
    with pytest.raises(HandoffError, match="epoch is 1"):
        plane.update("app", with_fence(F, epoch=0))
    plane.update("app", cut_over(Slot.GREEN, from_epoch=1))
    plane.update("app", with_fence(F, epoch=2))  # the next handoff
    with pytest.raises(HandoffError, match="epoch is 2"):
        plane.update("app", without_fence(epoch=1))  # an old handoff must not lift the new epoch's fence
    with pytest.raises(HandoffError, match="epoch is 2"):
        plane.update("app", cut_over(Slot.BLUE, from_epoch=1))


def test_a_cutover_needs_a_fence(plane):
    with pytest.raises(HandoffError, match="no fence"):
        plane.update("app", cut_over(Slot.GREEN, from_epoch=1))


def test_fence_reached_only_when_both_stand_exactly_at_it():
    assert not fence_reached(marker({0: 100, 1: 150}), [standby({0: 100, 1: 150})], F, 1, active_holds=True).met
    assert not fence_reached(marker(F), [standby({0: 100, 1: 150})], F, 1, active_holds=True).met
    check = fence_reached(marker(F), [standby({0: 90, 1: 90}), standby(F)], F, 1, active_holds=True)
    assert check.met and not check.failed


def test_an_active_at_the_fence_without_its_word_that_it_holds_there_is_waited_for():
    # Its marker says where it stands, not that it stays: idle at the input's end, it can stand at a
    # fence it has not seen yet (baton.fence_gate).
    check = fence_reached(marker(F), [standby(F)], F, 1, active_holds=False)
    assert not check.met and not check.failed and "its word that it holds there" in check.message
    assert fence_reached(marker({0: 101, 1: 200}), [standby(F)], F, 1, active_holds=False).failed  # past F


def test_a_trailing_standby_may_be_handed_the_role_once_the_active_stands_at_the_fence():
    now = 1_000_000
    short = [standby({0: 60, 1: 200}, ts_ms=now - 500)]
    assert not fence_reached(
        marker(F), short, F, 1, active_holds=True, now_ms=now
    ).met  # by default both must stand at F
    check = fence_reached(marker(F), short, F, 1, active_holds=True, trail_records=1000, now_ms=now)
    assert check.met and "40 records short" in check.message
    assert not fence_reached(
        marker(F), short, F, 1, active_holds=True, trail_records=39, now_ms=now
    ).met  # beyond the lag bound
    # Never before the active stands at F, nor to a standby that is gone quiet, failed, or has no batch yet.
    assert not fence_reached(
        marker({0: 90, 1: 200}), short, F, 1, active_holds=True, trail_records=1000, now_ms=now
    ).met
    quiet = [standby({0: 60, 1: 200}, ts_ms=now - TRAILING_STANDBY_FRESH_MS - 1)]
    assert not fence_reached(marker(F), quiet, F, 1, active_holds=True, trail_records=1000, now_ms=now).met
    failed = short + [standby({}, batch_id=-1, ts_ms=now, state=SlotState.FAILED)]
    assert not fence_reached(marker(F), failed, F, 1, active_holds=True, trail_records=1000, now_ms=now).met
    assert not fence_reached(
        marker(F), [standby({}, batch_id=-1, ts_ms=now)], F, 1, active_holds=True, trail_records=1000, now_ms=now
    ).met
    # A standby past F still fails the wait.
    assert fence_reached(
        marker(F), [standby({0: 101, 1: 200}, ts_ms=now)], F, 1, active_holds=True, trail_records=1000, now_ms=now
    ).failed


def test_the_fence_a_slot_took_over_at_holds_for_that_slot_at_that_epoch_only(plane):
    plane.update("app", with_fence(F, epoch=1, by="run"))
    assert taken_over_at(plane.current("app"), Slot.GREEN) is None  # not cut over yet
    rec = plane.update("app", cut_over(Slot.GREEN, from_epoch=1))
    assert taken_over_at(rec, Slot.GREEN) == F and taken_over_at(rec, Slot.BLUE) is None
    rec = plane.update("app", with_fence({0: 300, 1: 300}, epoch=2, by="next"))
    assert taken_over_at(rec, Slot.GREEN) is None  # the next handoff's


def test_an_active_that_read_past_the_fence_aborts_the_handoff():
    check = fence_reached(marker({0: 101, 1: 200}), [standby(F)], F, 1, active_holds=True)
    assert check.failed and "emitted past the fence" in check.message and "0: (101, 100)" in check.message


def test_a_standby_past_the_fence_or_a_newer_writer_fails_the_wait():
    assert fence_reached(marker(F), [standby({0: 100, 1: 201})], F, 1, active_holds=True).failed
    assert "newer handoff" in fence_reached(marker(F, epoch=2), [standby(F)], F, 1, active_holds=True).message


def test_an_active_that_died_short_of_the_fence_fails_the_wait():
    check = fence_reached(
        marker({0: 50, 1: 200}), [standby({0: 50, 1: 200})], F, 1, active_holds=True, active_alive=False
    )
    assert check.failed and "died" in check.message


def test_saw_epoch_needs_a_record_since_the_cutover():
    history = [standby(F, epoch_seen=1, ts_ms=10), standby(F, epoch_seen=2, ts_ms=20)]
    assert saw_epoch(history, 2, since_ms=15)
    assert not saw_epoch(history, 2, since_ms=25)
    assert not saw_epoch(history[:1], 2)


def test_a_failover_fence_replaces_a_handoff_fence_the_dead_active_cannot_reach(plane):
    from baton.handoff import failover_fence

    plane.update("app", with_fence(F, epoch=1))
    rec = plane.update("app", failover_fence({0: 40, 1: 50}, epoch=1))
    assert rec.fence == {0: 40, 1: 50} and rec.epoch == 1
    with pytest.raises(HandoffError, match="epoch is 1"):
        plane.update("app", failover_fence({0: 40, 1: 50}, epoch=2))


def test_a_fence_expires_and_is_stale_only_until_its_handoff_ends(plane):
    rec = plane.update("app", with_fence(F, 1, expires_ms=5_000))
    assert rec.fence_expires_ms == 5_000
    assert not stale_fence(rec, now_ms=4_999) and stale_fence(rec, now_ms=5_001)
    assert plane.update("app", with_fence(F, 1, expires_ms=9_000)).fence_expires_ms == 5_000  # a retry: as set
    lifted = plane.update("app", without_fence(1))
    assert (lifted.fence, lifted.fence_expires_ms) == (None, 0) and not stale_fence(lifted, 10_000)
    plane.update("app", with_fence(F, 1))  # no expiry: never stale
    assert not stale_fence(plane.current("app"), 10**15)
    moved = plane.update("app", cut_over(Slot.GREEN, 1))
    assert (moved.fence, moved.fence_expires_ms) == (None, 0)


def test_a_finished_handoff_is_recognised_by_its_own_run_only(plane):
    plane.update("app", with_fence(F, epoch=1, by="run1"))
    assert finished(plane.current("app"), "run1") is None  # fenced, not cut over yet
    done = plane.update("app", cut_over(Slot.GREEN, from_epoch=1))
    assert finished(done, "run1") == Handoff("run1", 1, F, Slot.GREEN)
    assert finished(done, "run2") is None
    # A later failover replaces the record of the last handoff.
    plane.update("app", failover_fence({0: 5, 1: 5}, 2))
    assert plane.current("app").handoff.id == FAILOVER and finished(plane.current("app"), "run1") is None


def active_batches(*ends_ms, processed=None, rate=50_000.0):
    return [
        StatusRecord(
            app="app",
            slot=Slot.BLUE,
            state=SlotState.RUNNING,
            role=Role.ACTIVE,
            epoch_seen=1,
            batch_id=i,
            processed=processed or {0: 900, 1: 900},
            input_rate=rate,
            ts_ms=t,
        )
        for i, t in enumerate(ends_ms)
    ]


def test_a_catching_up_active_does_not_push_the_position_far_ahead():
    """A position planned ahead of the input (a fence, a state check position) is ahead by what arrives in
    `ahead_s` at the input's measured arrival rate, not at the rate the active last read at."""
    now = [0.0]
    sleep = lambda s: now.__setitem__(0, now[0] + s)  # noqa: E731
    # 1,000 records arrived in the 1 s window; the active, working through a backlog, read 50,000/s.
    ends = [{0: 1_000, 1: 1_000}, {0: 1_500, 1: 1_500}]
    position = plan_ahead(
        lambda: active_batches(0, 1_000), lambda: ends.pop(0), 2, ahead_s=2.0, sleep=sleep, clock=lambda: now[0]
    )
    assert position == {0: 1_500 + 1_000, 1: 1_500 + 1_000}  # 2 s at 1,000/s, split over 2 partitions
    idle = [{0: 1_500, 1: 1_500}, {0: 1_500, 1: 1_500}]
    assert plan_ahead(
        lambda: active_batches(0, 1_000), lambda: idle.pop(0), 2, ahead_s=2.0, sleep=sleep, clock=lambda: now[0]
    ) == {0: 1_500, 1: 1_500}


def test_the_position_lies_further_ahead_than_the_active_s_slow_batches_span():
    """Seen through Airflow at the seed's rate: the active's batches spanned ~2.5 s of input and a check
    position 2 s ahead (the form's default) was read past within a batch, three times running."""
    assert ahead_s_for(2.0, active_batches(0, 1_000, 2_000)) == 2.0  # 1 s batches: the form's value holds
    assert ahead_s_for(2.0, active_batches(0, 1_000, 3_500, 6_000)) == 5.0  # 2.5 s batches: twice that
    assert ahead_s_for(2.0, []) == 2.0
    now = [0.0]
    sleep = lambda s: now.__setitem__(0, now[0] + s)  # noqa: E731
    ends = [{0: 1_000, 1: 1_000}, {0: 1_500, 1: 1_500}]  # 1,000 records/s arrive
    slow = plan_ahead(
        lambda: active_batches(0, 2_500, 5_000), lambda: ends.pop(0), 2, ahead_s=2.0, sleep=sleep, clock=lambda: now[0]
    )
    assert slow == {0: 1_500 + 2_500, 1: 1_500 + 2_500}  # 5 s at 1,000/s


def test_a_fence_lies_far_enough_ahead_for_the_slower_standby_too():
    """Seen in the product-path bench: a fence planned by the active's 1.4 s batches alone lay ~7 s of
    input ahead of the paced standby, whose catch-up after the active stood at F was the output gap."""
    now = [0.0]
    sleep = lambda s: now.__setitem__(0, now[0] + s)  # noqa: E731

    def plan(standby):
        ends = [{0: 1_000, 1: 1_000}, {0: 1_500, 1: 1_500}]  # 1,000 records/s arrive
        return plan_ahead(
            lambda: active_batches(0, 1_000, 2_000),
            lambda: ends.pop(0),
            2,
            ahead_s=2.0,
            sleep=sleep,
            clock=lambda: now[0],
            read_standby=standby,
        )

    assert plan(None) == {0: 1_500 + 1_000, 1: 1_500 + 1_000}  # the active's 1 s batches: the form's 2 s
    assert plan(lambda: active_batches(0, 3_000, 6_000)) == {0: 1_500 + 3_000, 1: 1_500 + 3_000}  # 3 s: 6 s
    assert plan(lambda: []) == {0: 1_500 + 1_000, 1: 1_500 + 1_000}  # a standby with no batch yet
    # Just warmed up: one 15 s catch-up batch among its last ones, then 3 s paced ones: 6 s, not 30 s.
    warmed = plan(lambda: active_batches(0, 15_000, 18_000, 21_000, 24_000))
    assert warmed == {0: 1_500 + 3_000, 1: 1_500 + 3_000}
