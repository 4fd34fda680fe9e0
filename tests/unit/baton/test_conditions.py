import dataclasses

from baton.conditions import following, position_reached, slot_running
from baton.records import CommitMarker, Role, Slot, SlotState, StatusRecord


def rec(ts, state=SlotState.RUNNING, batch=0, processed=None, error="", pid=7):
    return StatusRecord(
        app="a",
        slot=Slot.BLUE,
        state=state,
        role=Role.ACTIVE,
        epoch_seen=1,
        batch_id=batch,
        processed=processed or {},
        error=error,
        pid=pid,
        ts_ms=ts,
    )


def test_running_needs_a_running_record_of_the_new_launch():
    old = rec(100, batch=9)
    assert not slot_running([old], since_ms=200).met  # the previous launch's record does not count
    assert not slot_running([old, rec(210, SlotState.RESTORING, batch=-1)], since_ms=200).met
    assert slot_running([old, rec(210, SlotState.RESTORING, batch=-1), rec(300, batch=10)], since_ms=200).met
    # An idle query (no input yet) is running too: its heartbeat says so before any batch.
    assert slot_running([rec(210, SlotState.RESTORING, batch=-1), rec(220, batch=-1)], since_ms=200).met


def test_running_fails_fast_when_the_launch_failed_and_names_the_error():
    check = slot_running([rec(300, SlotState.FAILED, batch=-1, error="ImportError: no module x")], since_ms=200)
    assert check.failed and "ImportError" in check.message


def test_running_can_require_the_launched_pid():
    assert not slot_running([rec(300, pid=8)], since_ms=0, pid=7).met
    assert slot_running([rec(300, pid=7)], since_ms=0, pid=7).met


def test_position_reached_on_every_partition():
    assert not position_reached([rec(1, processed={0: 10, 1: 4})], {0: 10, 1: 5}).met
    assert position_reached([rec(1, processed={0: 10, 1: 5})], {0: 10, 1: 5}).met


def standby_batch(ts, processed, batch=3, state=SlotState.RUNNING, knew=None, took_ms=0):
    """A standby's status record: `knew`, the active's output its follower had read; `took_ms`, the batch's time."""
    return dataclasses.replace(
        rec(ts, state=state, batch=batch, processed=processed),
        slot=Slot.GREEN,
        role=Role.STANDBY,
        emitted=knew,
        batch_ms=took_ms,
    )


def marker(emitted):
    return CommitMarker(app="a", generation=0, epoch=1, slot=Slot.BLUE, batch_id=50, emitted=emitted)


def test_warm_up_measures_the_standby_against_the_active_s_output_with_its_pace_allowed():
    """Seen through Airflow at 20k events/s: a standby paced at 2 s behind an active that trails the input
    by a batch sits 40-80k records short of the input's end; the gate on the end (50,000) waited 208-422 s."""
    active_at = marker({0: 500_000, 1: 500_000})
    # 60,000 records (3 s at 20k/s) behind the active's output: 10,000 + the pace's 40,000 is the limit.
    behind = [standby_batch(100, {0: 470_000, 1: 470_000})]
    waiting = following(behind, active_at, rate=20_000, max_records=10_000, max_seconds=10, pace_s=2.0)
    assert waiting.waiting and "60000 records (3.0 s of input) short of" in waiting.message
    near = [standby_batch(100, {0: 480_000, 1: 475_000})]  # 45,000 behind: within 10,000 + 40,000
    assert following(near, active_at, rate=20_000, max_records=10_000, max_seconds=10, pace_s=2.0).met
    # The seconds bound (plus the pace) holds too.
    assert following(
        near, active_at, rate=20_000, max_records=10**9, max_seconds=0.5, pace_s=2.0
    ).met  # 2.25 s <= 2.5 s
    assert following(near, active_at, rate=20_000, max_records=10**9, max_seconds=0.5, pace_s=0.0).waiting


def test_warm_up_counts_only_batches_of_the_new_launch_and_fails_on_a_failed_slot():
    active_at = marker({0: 100, 1: 100})
    old = [standby_batch(50, {0: 100, 1: 100})]
    assert following(old, active_at, rate=10, max_records=0, max_seconds=None, pace_s=0, since_ms=60).waiting
    restoring = old + [standby_batch(70, {}, batch=-1, state=SlotState.RESTORING)]
    assert (
        "no batch since its start (restoring)" in following(restoring, active_at, 10, 0, None, 0, since_ms=60).message
    )
    failed = following(old + [standby_batch(80, {}, batch=-1, state=SlotState.FAILED)], active_at, 10, 0, None, 0, 60)
    assert failed.failed
    # Nothing emitted yet by the active (or no input at all): a standby with a batch is as close as can be.
    assert following(old, None, rate=0, max_records=0, max_seconds=5, pace_s=2).met


def test_warm_up_holds_a_batch_to_the_active_s_output_when_it_started_not_now():
    """Seen through Airflow on a busy host: the standby's batches took 10 s, so at every check it stood
    ~200k records (10 s at 20k/s) short of what the active had emitted since; the gate met only by luck."""
    now = marker({0: 400_000, 1: 400_000})
    before = standby_batch(1_000, {0: 290_000, 1: 290_000}, batch=3, knew={0: 300_000, 1: 300_000}, took_ms=9_000)
    # Batch 4 started at 1,000 (11,000 less its 10 s) and read all the active had emitted by then.
    follower = [before, standby_batch(11_000, {0: 300_000, 1: 300_000}, batch=4, took_ms=10_000)]
    check = following(follower, now, rate=20_000, max_records=50_000, max_seconds=None, pace_s=2.0)
    assert check.met
    assert "0 records (0.0 s of input) short of the active's output when its last batch started" in check.message
    assert "200000 of its output now; the batch took 10.0 s" in check.message
    # A replay's batch ends short of what was there at its start: it waits, however its batches are timed.
    replay = [before, standby_batch(11_000, {0: 200_000, 1: 200_000}, batch=4, took_ms=10_000)]
    assert following(replay, now, rate=20_000, max_records=50_000, max_seconds=None, pace_s=2.0).waiting


def test_warm_up_holds_a_launch_s_first_batch_and_a_late_record_to_what_is_known():
    now = marker({0: 400_000})
    # A launch's first batch reads the backlog since its restart: held to the active's output now.
    first = [standby_batch(11_000, {0: 300_000}, batch=4, took_ms=10_000)]
    assert following(first, now, rate=20_000, max_records=50_000, max_seconds=None, pace_s=0).waiting
    # The records of an earlier launch (before since_ms) are no reference either.
    earlier = standby_batch(500, {0: 290_000}, batch=3, knew={0: 300_000})
    assert following([earlier, *first], now, 20_000, 50_000, None, 0, since_ms=600).waiting
    # The batch before's record, published after this batch started (the progress event comes later),
    # is not what this batch knew: the one before it is.
    late = standby_batch(1_500, {0: 295_000}, batch=3, knew={0: 390_000})
    older = standby_batch(800, {0: 280_000}, batch=2, knew={0: 300_000})
    assert following([older, late, *first], now, 20_000, 50_000, None, 0).met
    assert following([late, *first], now, 20_000, 50_000, None, 0).waiting  # held to now
