import dataclasses

from baton.conditions import WAIT, lag_within, position_reached, slot_running
from baton.records import Role, Slot, SlotState, StatusRecord


def rec(ts, state=SlotState.RUNNING, batch=0, processed=None, error="", pid=7):
    return StatusRecord(app="a", slot=Slot.BLUE, state=state, role=Role.ACTIVE, epoch_seen=1, batch_id=batch,
                        processed=processed or {}, error=error, pid=pid, ts_ms=ts)


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


def test_lag_within_counts_every_partition_and_ignores_a_short_end():
    assert not lag_within([rec(1, processed={0: 10, 1: 0})], {0: 10, 1: 6}, max_records=5).met
    assert lag_within([rec(1, processed={0: 12, 1: 1})], {0: 10, 1: 6}, max_records=5).met  # 0 + 5


def test_lag_within_can_also_bound_the_seconds_of_input_behind():
    behind = [dataclasses.replace(rec(1, processed={0: 0, 1: 0}), input_rate=1_000.0)]
    assert lag_within(behind, {0: 1_500, 1: 1_500}, max_records=5_000, max_seconds=5).met  # 3 s
    assert lag_within(behind, {0: 4_000, 1: 4_000}, max_records=10_000, max_seconds=5) is WAIT  # 8 s
    idle = [rec(1, processed={0: 0, 1: 0})]  # no rate measured: any lag is too many seconds
    assert lag_within(idle, {0: 1, 1: 0}, max_records=10, max_seconds=5) is WAIT
    assert lag_within(idle, {0: 0, 1: 0}, max_records=10, max_seconds=5).met
