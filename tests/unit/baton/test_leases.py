"""Leases: the record, expiry judged by the standby's own renewals (not clocks), the takeover decision, and a
restarted active's step-down."""

import dataclasses
import os

import pytest

from baton.control_plane import ControlPlane
from baton.handoff import FAILOVER, HandoffError, take_over, taken_over_at
from baton.leases import (
    RECOVERY_GRACE_MS,
    Lease,
    LeaseJudge,
    decide_step_down,
    decide_takeover,
    decode_lease,
    max_gap_ms,
    proc_start_ticks,
    process_gone,
)
from baton.records import ControlRecord, RecordError, Role, Slot, SlotSpec, SlotState, StatusRecord
from tests.support.fakes import MemoryControlStore

INTERVAL, TTL = 1000, 4000


def lease(slot=Slot.BLUE, ts=0, launch=None, state=SlotState.RUNNING, host="h1", pid=10, pid_start=5, app="app"):
    return Lease(
        app=app,
        slot=slot,
        launch=launch or f"launch-{slot.value}",
        host=host,
        pid=pid,
        pid_start=pid_start,
        state=state,
        role=Role.ACTIVE if slot is Slot.BLUE else Role.STANDBY,
        epoch_seen=1,
        seq=1,
        ts_ms=ts,
        ttl_ms=TTL,
        interval_ms=INTERVAL,
    )


def judge_after(*leases) -> LeaseJudge:
    j = LeaseJudge("app", Slot.GREEN, "launch-green", INTERVAL)
    for item in leases:
        j.observe(item)
    return j


def mine(ts):
    return lease(Slot.GREEN, ts)


def control(active_desired=SlotState.RUNNING, standby_desired=SlotState.RUNNING, operation="", generations=(0, 0)):
    return ControlRecord(
        app="app",
        revision=3,
        epoch=1,
        active=Slot.BLUE,
        operation=operation,
        slots={
            Slot.BLUE: SlotSpec(desired=active_desired, generation=generations[0]),
            Slot.GREEN: SlotSpec(desired=standby_desired, generation=generations[1]),
        },
    )


def test_a_lease_round_trips_and_a_malformed_or_foreign_one_is_skipped():
    item = lease(ts=123)
    assert Lease.from_bytes(item.to_bytes()) == item
    assert decode_lease("app", item.key(), item.to_bytes()) == item
    assert decode_lease("other", item.key(), item.to_bytes()) is None
    assert decode_lease("app", item.key(), b"{not json") is None
    with pytest.raises(RecordError, match="pid"):
        Lease.from_bytes(item.to_bytes().replace(b'"pid":10', b'"pid":"x"'))


def test_the_other_slot_is_silent_for_as_long_as_my_steady_renewals_since_its_last_one():
    j = judge_after(lease(ts=0), mine(500), mine(1500), mine(2500))
    assert j.silent_ms() == 3000  # the first of mine stands for its last renewal: one interval before
    j.observe(mine(3500))
    assert j.silent_ms() == 4000
    j.observe(lease(ts=3600))  # it renewed: silence starts over
    assert j.silent_ms() == 0


def test_a_gap_in_my_own_renewals_restarts_the_count_so_a_broker_pause_expires_nobody():
    # The broker stalled for 15 s: my renewals stop landing too. Mine from before and after it do not
    # add up to a silence of the other.
    j = judge_after(lease(ts=0), mine(500), mine(1500), mine(16_500), mine(17_500))
    assert j.silent_ms() == 0
    assert max_gap_ms(INTERVAL) < 15_000 - INTERVAL


def test_after_a_gap_in_my_own_renewals_the_other_gets_time_to_reconnect_before_its_silence_counts():
    # The broker came back at 16 s; the active's client waits out a request timeout before it renews.
    after = [mine(t) for t in range(16_500, 16_500 + RECOVERY_GRACE_MS + TTL, INTERVAL)]
    j = judge_after(lease(ts=0), mine(500), mine(1500), *after[: RECOVERY_GRACE_MS // INTERVAL])
    assert j.silent_ms() == 0  # a ttl of my renewals since the stall, but still within the grace
    for item in after[RECOVERY_GRACE_MS // INTERVAL :]:
        j.observe(item)
    assert j.silent_ms() == TTL  # it never came back: dead, failed over a grace later than without a stall
    j.observe(lease(ts=after[-1].ts_ms + 100))  # it renewed: the next silence counts without the grace
    for item in (mine(after[-1].ts_ms + 500 + i * INTERVAL) for i in range(TTL // INTERVAL)):
        j.observe(item)
    assert j.silent_ms() == TTL


def test_a_new_epoch_counts_the_new_active_silence_from_then():
    j = judge_after(lease(ts=0), *(mine(t) for t in range(500, 5000, 1000)))
    assert j.silent_ms() >= TTL
    j.restart_count()  # a cutover handed it the role while it was stalled: not failed over for that
    assert j.silent_ms() == 0
    j.observe(mine(5500))
    assert j.silent_ms() == INTERVAL


def test_renewals_of_an_earlier_launch_of_my_slot_do_not_count():
    j = judge_after(lease(ts=0), lease(Slot.GREEN, 500, launch="old"), lease(Slot.GREEN, 4500, launch="old"))
    assert j.silent_ms() == 0


def test_the_standby_takes_over_when_the_active_lease_expired_and_only_then():
    silent = judge_after(lease(ts=0), *(mine(t) for t in range(500, 4000, 1000)))
    assert silent.silent_ms() >= TTL
    go = decide_takeover(control(), Slot.GREEN, SlotState.RUNNING, silent, False, {0: 90}, {0: 100}, 1000)
    assert go.go and "lease expired" in go.reason
    holding = judge_after(lease(ts=0), mine(500), mine(1500))
    assert not decide_takeover(control(), Slot.GREEN, SlotState.RUNNING, holding, False, {0: 90}, {0: 100}, 1000).go
    # ... unless its process is known gone (same host): at once.
    gone = decide_takeover(control(), Slot.GREEN, SlotState.RUNNING, holding, True, {0: 90}, {0: 100}, 1000)
    assert gone.go and "is gone" in gone.reason


@pytest.mark.parametrize(
    "case, args, why",
    [
        ("the active is being stopped", dict(rec=control(active_desired=SlotState.STOPPING)), "not desired running"),
        ("this standby is stopping", dict(rec=control(standby_desired=SlotState.STOPPING)), "not running"),
        ("this standby still restores", dict(state=SlotState.RESTORING), "not running"),
        ("a reprocess holds the app", dict(rec=control(operation="reprocess by r1")), "held by"),
        ("the generations differ", dict(rec=control(generations=(0, 1))), "generations differ"),
        ("the active released its lease", dict(other_state=SlotState.STOPPED), "released"),
        ("the standby is past the active's output", dict(processed={0: 101}), "past what the active emitted"),
        ("the standby is too far behind", dict(processed={0: 10}), "records behind"),
        (
            "not the standby",
            dict(rec=ControlRecord(app="app", revision=1, epoch=2, active=Slot.GREEN)),
            "not the standby",
        ),
    ],
)
def test_no_takeover_when(case, args, why):
    j = judge_after(
        lease(ts=0, state=args.get("other_state", SlotState.RUNNING)), *(mine(t) for t in range(500, 5000, 1000))
    )
    decision = decide_takeover(
        args.get("rec", control()),
        Slot.GREEN,
        args.get("state", SlotState.RUNNING),
        j,
        True,
        args.get("processed", {0: 95}),
        {0: 100},
        max_lag_records=50,
    )
    assert not decision.go and why in decision.reason, case


def test_a_rolling_upgrade_s_hold_leaves_the_failover_on_and_a_reprocess_s_does_not():
    """A rolling upgrade holds its app against other handoffs only: a dead active's standby still takes
    over (the upgrade's own cutover then fails at its gate, the epoch having moved)."""
    gone = judge_after(lease(ts=0), mine(500), mine(1500))
    upgrading = control(operation="rolling upgrade by manual__up1")
    assert not upgrading.role_held and control(operation="reprocess by r1").role_held
    go = decide_takeover(upgrading, Slot.GREEN, SlotState.RUNNING, gone, True, {0: 90}, {0: 100}, 1000)
    assert go.go and "is gone" in go.reason


def test_no_takeover_before_any_lease_of_the_active_was_seen():
    j = judge_after(*(mine(t) for t in range(0, 6000, 1000)))
    assert not decide_takeover(control(), Slot.GREEN, SlotState.RUNNING, j, False, {0: 1}, {0: 1}, 10).go


def test_a_process_on_this_host_is_gone_when_its_pid_is_free_or_reused():
    me = lease(host="h1", pid=os.getpid(), pid_start=proc_start_ticks(os.getpid()))
    assert not process_gone(me, "h1", proc_start_ticks)
    assert process_gone(me, "h1", lambda pid: None)
    assert process_gone(me, "h1", lambda pid: me.pid_start + 1)  # another process got the pid
    assert not process_gone(me, "h2", lambda pid: None)  # another host's process: only its lease says


def test_a_killed_process_not_yet_reaped_is_gone():
    import signal
    import subprocess
    import time

    child = subprocess.Popen(["sleep", "30"])
    try:
        assert proc_start_ticks(child.pid) is not None
        child.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 5
        while open(f"/proc/{child.pid}/stat").read().split(") ")[1][0] != "Z":  # not reaped: a zombie
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert proc_start_ticks(child.pid) is None
    finally:
        child.kill()
        child.wait()
    assert proc_start_ticks(child.pid) is None  # reaped: no such process


def test_take_over_moves_the_role_once_with_the_failover_fence_and_the_reason():
    plane = ControlPlane(MemoryControlStore(), writer="test")
    plane.move_slot("app", Slot.BLUE, SlotState.STARTING)
    plane.move_slot("app", Slot.GREEN, SlotState.STARTING)
    before = plane.update("app", lambda r: r)
    rec = plane.update(
        "app", take_over(Slot.GREEN, before.epoch, {0: 7}, "lease expired", 1234), expected_epoch=before.epoch
    )
    assert (rec.active, rec.epoch, rec.fence) == (Slot.GREEN, before.epoch + 1, None)
    assert rec.handoff.id == FAILOVER and rec.handoff.fence == {0: 7}
    assert taken_over_at(rec, Slot.GREEN) == {0: 7}
    assert (rec.handoff.reason, rec.handoff.ts_ms) == ("lease expired", 1234)
    assert plane.update("app", take_over(Slot.GREEN, before.epoch, {0: 7}, "lease expired", 9)) == rec  # a retry
    with pytest.raises(HandoffError, match="epoch is"):
        plane.update("app", take_over(Slot.BLUE, before.epoch, {0: 7}, "x", 9))


def standby_status(ts=100_000, processed=None, state=SlotState.RUNNING, role=Role.STANDBY, generation=0):
    return StatusRecord(
        app="app",
        slot=Slot.GREEN,
        state=state,
        role=role,
        epoch_seen=1,
        batch_id=7,
        generation=generation,
        processed={0: 95} if processed is None else processed,
        ts_ms=ts,
    )


def test_a_restarted_active_hands_over_to_its_running_standby():
    go = decide_step_down(control(), Slot.BLUE, standby_status(), {0: 100}, 50, 105_000)
    assert go.go and "handed over to its running standby, 5 records behind" in go.reason


@pytest.mark.parametrize(
    "case, kw, why",
    [
        ("not the active", dict(me=Slot.GREEN), "not the active"),
        ("a cutover's fence is set", dict(rec=dataclasses.replace(control(), fence={0: 90})), "in flight"),
        ("a reprocess holds the app", dict(rec=control(operation="reprocess by r1")), "in flight"),
        ("the standby is being stopped", dict(rec=control(standby_desired=SlotState.STOPPING)), "not desired"),
        ("the generations differ", dict(rec=control(generations=(0, 1))), "generations differ"),
        ("no standby status", dict(status=None), "not running now"),
        ("the standby's last word is old", dict(status=standby_status(ts=90_000)), "not running now"),
        ("the standby still restores", dict(status=standby_status(state=SlotState.RESTORING)), "not running now"),
        ("the standby died too", dict(status=standby_status(state=SlotState.FAILED)), "not running now"),
        ("the standby is past the output", dict(status=standby_status(processed={0: 101})), "past what was emitted"),
        ("the standby is far behind", dict(status=standby_status(processed={0: 10})), "records behind"),
    ],
)
def test_a_restarted_active_restores_itself_when(case, kw, why):
    status = kw["status"] if "status" in kw else standby_status()
    decision = decide_step_down(kw.get("rec", control()), kw.get("me", Slot.BLUE), status, {0: 100}, 50, 105_000)
    assert not decision.go and why in decision.reason, case
