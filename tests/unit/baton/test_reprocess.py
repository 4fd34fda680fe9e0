"""A reprocess request is refused, with its reason, before anything changes."""

import re

import pytest

from baton.control_plane import ControlPlane
from baton.records import ControlRecord, Slot, SlotSpec, SlotState
from baton.reprocess import (
    RequestRefused,
    Start,
    begin_operation,
    check_app_state,
    end_operation,
    parse_end,
    resolve_start,
)
from tests.support.fakes import MemoryControlStore

LOWS, ENDS, NOW = {0: 0, 1: 5}, {0: 100, 1: 80}, 1_700_000_000_000


def resolve(start, for_timestamp=lambda ts: {0: 40, 1: 30}):
    return resolve_start(start, 2, LOWS, ENDS, NOW, for_timestamp)


def test_each_start_resolves_to_an_offset_per_partition():
    assert resolve(Start.parse("earliest")) == {0: 0, 1: 5}
    assert resolve(Start.parse("timestamp", NOW - 60_000)) == {0: 40, 1: 30}
    assert resolve(Start.parse("offsets", offsets={"0": 10, "1": 80})) == {0: 10, 1: 80}


@pytest.mark.parametrize(
    "start, words",
    [
        (dict(kind="yesterday"), "not one of earliest, timestamp, offsets"),
        (dict(kind="timestamp"), "needs start_timestamp_ms"),
        (dict(kind="timestamp", timestamp_ms=NOW + 60_000), "in the future"),
        (dict(kind="offsets"), "needs start_offsets"),
        (dict(kind="offsets", offsets={"zero": 1}), "must map partition numbers"),
        (dict(kind="offsets", offsets={"0": -1, "1": 0}), "offsets >= 0"),
        (dict(kind="offsets", offsets={"0": 10, "1": 10, "7": 0}), "partition(s) [7] do not exist"),
        (dict(kind="offsets", offsets={"0": 10}), "missing [1]"),
        (dict(kind="offsets", offsets={"0": 101, "1": 10}), "offset 101 on partition 0 is beyond the log end 100"),
        (dict(kind="offsets", offsets={"0": 1, "1": 2}), "before the log start 5"),
    ],
)
def test_bad_starts_are_refused_with_the_reason(start, words):
    asked = []
    with pytest.raises(RequestRefused, match=re.escape(words)):
        resolve(
            Start.parse(start["kind"], start.get("timestamp_ms"), start.get("offsets")),
            lambda ts: asked.append(ts) or {},
        )
    assert asked == []  # a refused timestamp never reaches the broker


def test_the_end_is_a_handover_or_a_staged_standby():
    assert parse_end("handover") == "handover" and parse_end("standby") == "standby"
    with pytest.raises(RequestRefused, match="end 'later' is not one of handover, standby"):
        parse_end("later")


def record(**kw):
    both = {s: SlotSpec(SlotState.RUNNING, "v1") for s in Slot}
    return ControlRecord(**{"app": "a", "revision": 1, "epoch": 1, "active": Slot.BLUE, "slots": both, **kw})


def test_the_app_must_be_running_and_free():
    check_app_state(record(), NOW)
    check_app_state(record(operation="reprocess by r0", operation_expires_ms=NOW - 1), NOW)  # expired: free
    with pytest.raises(RequestRefused, match="never been started"):
        check_app_state(None, NOW)
    with pytest.raises(RequestRefused, match="reprocess by r1 is under way"):
        check_app_state(record(operation="reprocess by r1", operation_expires_ms=NOW + 1), NOW)
    with pytest.raises(RequestRefused, match="a handoff is under way"):
        check_app_state(record(fence={0: 1}), NOW)
    with pytest.raises(RequestRefused, match="slot green is stopped"):
        check_app_state(record(slots={Slot.BLUE: SlotSpec(SlotState.RUNNING), Slot.GREEN: SlotSpec()}), NOW)


def test_one_operation_at_a_time_and_a_retry_is_a_no_op():
    plane = ControlPlane(MemoryControlStore(), writer="test")
    plane.move_slot("a", Slot.BLUE, SlotState.STARTING)
    plane.update("a", begin_operation("reprocess by r1", NOW + 1_000, NOW))
    revision = plane.current("a").revision
    plane.update("a", begin_operation("reprocess by r1", NOW + 1_000, NOW))
    assert plane.current("a").revision == revision
    with pytest.raises(RequestRefused, match="reprocess by r1 is under way"):
        plane.update("a", begin_operation("reprocess by r2", NOW + 1_000, NOW))
    plane.update("a", end_operation("reprocess by r2"))  # not the one under way: nothing
    assert plane.current("a").operation == "reprocess by r1"
    plane.update("a", end_operation("reprocess by r1"))
    assert plane.current("a").operation == ""
