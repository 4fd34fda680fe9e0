"""Round trips and clear errors for the control-plane record formats."""

import dataclasses
import json

import pytest

from baton.records import (
    CommitMarker,
    ControlRecord,
    Handoff,
    InvariantsCheck,
    RecordError,
    Role,
    Slot,
    SlotSpec,
    SlotState,
    StateDigest,
    StatusRecord,
    covers,
)


def test_control_record_round_trip_and_roles():
    rec = ControlRecord(
        app="clicks",
        revision=3,
        epoch=2,
        active=Slot.GREEN,
        slots={Slot.BLUE: SlotSpec(SlotState.RUNNING, "v1", 1), Slot.GREEN: SlotSpec(SlotState.RUNNING, "v2", 1)},
        fence={0: 10, 1: 7},
        fence_expires_ms=9,
        handoff=Handoff("run1", 2, {0: 10, 1: 7}, Slot.BLUE, "why", 5),
        check_at={0: 9, 1: 7},
        correct_epoch=2,
        invariants_asked="run1:2",
        operation="reprocess by r1",
        operation_expires_ms=11,
        writer="airflow",
        ts_ms=5,
    )
    back = ControlRecord.from_bytes(rec.to_bytes())
    assert back == rec
    assert back.role_of(Slot.GREEN) is Role.ACTIVE and back.role_of(Slot.BLUE) is Role.STANDBY
    assert Slot.BLUE.other is Slot.GREEN


def test_status_record_round_trip():
    st = StatusRecord(
        app="a",
        slot=Slot.BLUE,
        state=SlotState.RUNNING,
        role=Role.STANDBY,
        epoch_seen=4,
        batch_id=9,
        processed={0: 5},
        emitted=None,
        state_rows=3,
        restore_ms=120,
    )
    assert StatusRecord.from_bytes(st.to_bytes()) == st
    assert st.key() == b"a/blue"
    uncounted = dataclasses.replace(st, state_rows=None)  # the app's state store does not count its rows
    assert StatusRecord.from_bytes(uncounted.to_bytes()).state_rows is None


def test_status_record_carries_a_state_digest():
    digest = StateDigest(at="check", batch_id=9, rows=100, digest="-42", schema="k|v", ts_ms=3, position={0: 5})
    st = StatusRecord(
        app="a",
        slot=Slot.BLUE,
        state=SlotState.RUNNING,
        role=Role.STANDBY,
        epoch_seen=4,
        state_digest=digest,
        active_digest=dataclasses.replace(digest, batch_id=11),
    )
    assert StatusRecord.from_bytes(st.to_bytes()).state_digest == digest
    assert StatusRecord.from_bytes(st.to_bytes()).active_digest.batch_id == 11
    body = json.loads(st.to_bytes())
    body["state_digest"]["at"] = "whenever"
    with pytest.raises(RecordError, match="'at' must be one of"):
        StatusRecord.from_bytes(json.dumps(body).encode())
    body["state_digest"] = {"at": "stop"}
    with pytest.raises(RecordError, match="missing field 'batch_id'"):
        StatusRecord.from_bytes(json.dumps(body).encode())


def test_status_record_carries_an_invariant_check_and_an_older_record_has_none():
    answer = InvariantsCheck(
        asked="run1:1",
        ok=False,
        batch_id=9,
        rows=100,
        violations=2,
        examples=("user 7: count 0", "user 8: count -1"),
        ts_ms=3,
    )
    st = StatusRecord(
        app="a",
        slot=Slot.GREEN,
        state=SlotState.RUNNING,
        role=Role.STANDBY,
        epoch_seen=4,
        generation=1,
        invariants=answer,
    )
    assert StatusRecord.from_bytes(st.to_bytes()) == st
    body = json.loads(st.to_bytes())
    del body["invariants"]  # a slot of an earlier Baton
    assert StatusRecord.from_bytes(json.dumps(body).encode()).invariants is None
    body["invariants"] = {"ok": True}
    with pytest.raises(RecordError, match="missing field 'asked'"):
        StatusRecord.from_bytes(json.dumps(body).encode())
    control = json.loads(ControlRecord(app="a", revision=1, epoch=1, active=Slot.BLUE).to_bytes())
    del control["invariants_asked"]
    assert ControlRecord.from_bytes(json.dumps(control).encode()).invariants_asked == ""


def test_commit_marker_round_trip():
    m = CommitMarker(app="a", generation=1, epoch=2, slot=Slot.BLUE, batch_id=7, emitted={0: 100, 2: 3})
    assert CommitMarker.from_bytes(m.to_bytes()) == m


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("epoch"), "missing field 'epoch'"),
        (lambda d: d.update(epoch="2"), "field 'epoch' must be int"),
        (lambda d: d.update(epoch=True), "field 'epoch' must be int"),
        (lambda d: d.update(v=99), "format version 99"),
        (lambda d: d.update(fence={"x": 1}), "'fence'"),
        (lambda d: d.update(active="purple"), "purple"),
    ],
)
def test_bad_control_records_name_the_problem(mutate, message):
    d = json.loads(ControlRecord(app="a", revision=1, epoch=1, active=Slot.BLUE).to_bytes())
    mutate(d)
    with pytest.raises(RecordError, match=message):
        ControlRecord.from_bytes(json.dumps(d).encode())


def test_not_json_is_a_record_error():
    with pytest.raises(RecordError, match="not JSON"):
        StatusRecord.from_bytes(b"{oops")


def test_covers():
    assert covers({0: 5, 1: 5}, {0: 5, 1: 4})
    assert not covers({0: 5}, {0: 5, 1: 1})


def test_an_operation_holds_the_app_until_it_expires_except_for_its_own_run():
    held = dataclasses.replace(
        ControlRecord(app="a", revision=1, epoch=1, active=Slot.BLUE),
        operation="rolling upgrade by manual__1",
        operation_expires_ms=1_000,
    )
    assert held.held_by_another(999) == "rolling upgrade by manual__1"
    assert held.held_by_another(1_000) == ""  # expired
    assert held.held_by_another(999, "manual__1") == ""  # its own run, retried
    assert held.held_by_another(999, "rolling upgrade by manual__1") == ""  # its own name
    assert held.held_by_another(999, "manual__2") == "rolling upgrade by manual__1"
    assert dataclasses.replace(held, operation="").held_by_another(0) == ""
