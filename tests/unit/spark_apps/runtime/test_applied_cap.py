"""The active's word that it holds at a handoff's fence (spark_apps.runtime.coordination.applied_cap): the source says
which cap write it plans under, the follower turns that into (handoff, fence) only for this very write."""

import dataclasses
import json

from baton.records import ControlRecord, Handoff, Role, Slot, SlotState, StatusRecord
from spark_apps.runtime.coordination.applied_cap import CAP_WRITE_KEY, AppliedCap, applied_path, read_applied
from spark_apps.runtime.coordination.follower import Follower
from spark_apps.runtime.source.source_plan import read_cap

F = {0: 10, 1: 20}


def fenced(by="run1", fence=F, active=Slot.BLUE):
    return ControlRecord(
        app="a", revision=1, epoch=1, active=active, fence=dict(fence), handoff=Handoff(by, 1, dict(fence), Slot.GREEN)
    )


def follower(tmp_path, slot=Slot.BLUE):
    return Follower("127.0.0.1:1", "a", slot, "commits", 2, tmp_path / "cap.json")


def plan(tmp_path, applied):
    """What the source does at each plan: read the cap, saying it plans under it."""
    return read_cap(str(tmp_path / "cap.json"), [0, 1], applied=applied)


def test_the_source_says_which_cap_write_it_plans_under_and_says_it_again_only_when_it_changes(tmp_path):
    cap_file = tmp_path / "cap.json"
    applied_path(cap_file).write_text("a stale word of an earlier process")
    applied = AppliedCap(str(cap_file))
    assert plan(tmp_path, applied) is None and read_applied(cap_file) is None  # no cap: the stale word is gone
    cap_file.write_text(json.dumps({"0": 10, "1": 20, CAP_WRITE_KEY: "7.1"}))
    assert plan(tmp_path, applied) == F  # the write's number is not a partition
    assert read_applied(cap_file) == cap_file.read_text()
    applied_path(cap_file).unlink()
    assert plan(tmp_path, applied) == F and read_applied(cap_file) is None  # unchanged: not written again
    cap_file.write_text(json.dumps({"0": 10, "1": 20, CAP_WRITE_KEY: "7.2"}))  # the same cap, a new write
    plan(tmp_path, applied)
    assert json.loads(read_applied(cap_file))[CAP_WRITE_KEY] == "7.2"
    cap_file.unlink()
    assert plan(tmp_path, applied) is None and read_applied(cap_file) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temp file left behind


def test_the_active_holds_at_the_fence_once_its_source_planned_under_that_very_write(tmp_path):
    f = follower(tmp_path)
    try:
        f.control = fenced()
        f._publish_cap()
        cap_file = tmp_path / "cap.json"
        assert f.held_fence(None) is None  # the source has not planned under it yet
        applied = AppliedCap(str(cap_file))
        plan(tmp_path, applied)
        assert f.held_fence(read_applied(cap_file)) == ("run1", F)
        # Rewritten for a record that changes neither the cap nor the fence (the active rewrites its cap at
        # each of its markers): the same text, so the word stands and the source's pacer sees no change.
        before = cap_file.read_text()
        f.control = dataclasses.replace(fenced(), revision=2)
        f._publish_cap()
        assert cap_file.read_text() == before and f.held_fence(read_applied(cap_file)) == ("run1", F)
        # A fence planned again further ahead is not held until the source plans under its write.
        f.control = fenced(fence={0: 30, 1: 40})
        f._publish_cap()
        assert f.held_fence(read_applied(cap_file)) is None
        plan(tmp_path, applied)
        assert f.held_fence(read_applied(cap_file)) == ("run1", {0: 30, 1: 40})
        # The fence lifted: no hold, whatever the source last said.
        f.control = ControlRecord(app="a", revision=3, epoch=1, active=Slot.BLUE)
        f._publish_cap()
        plan(tmp_path, applied)
        assert f.held_fence(read_applied(cap_file)) is None
    finally:
        f._consumer.close()


def test_a_word_from_an_earlier_process_or_for_a_fence_not_seen_is_no_hold(tmp_path):
    cap_file = tmp_path / "cap.json"
    f = follower(tmp_path)
    try:
        f.control = fenced(by="run0")
        f._publish_cap()
        earlier = cap_file.read_text()  # an earlier handoff's fence at the same positions
        f.control = ControlRecord(app="a", revision=2, epoch=1, active=Slot.BLUE)
        f._publish_cap()
        f.control = fenced(by="run1")
        f._publish_cap()
        assert json.loads(earlier) != json.loads(cap_file.read_text())  # numbered anew
        assert f.held_fence(earlier) is None
        # A fence this slot has not seen (the test fault late_position keeps the record's old fence).
        f.control = dataclasses.replace(fenced(), fence=None)
        f._publish_cap()
        applied = AppliedCap(str(cap_file))
        plan(tmp_path, applied)
        assert f.held_fence(read_applied(cap_file)) is None
    finally:
        f._consumer.close()
    standby = follower(tmp_path, slot=Slot.GREEN)  # a standby holds no fence of the active's
    try:
        standby.control = fenced()
        standby._publish_cap()
        plan(tmp_path, AppliedCap(str(cap_file)))
        assert standby.held_fence(read_applied(cap_file)) is None
    finally:
        standby._consumer.close()


def test_the_word_travels_in_the_status_record():
    rec = StatusRecord(
        app="a", slot=Slot.BLUE, state=SlotState.RUNNING, role=Role.ACTIVE, epoch_seen=1, held_fence=F, held_for="run1"
    )
    back = StatusRecord.from_bytes(rec.to_bytes())
    assert (back.held_fence, back.held_for) == (F, "run1")
    plain = StatusRecord.from_bytes(dataclasses.replace(rec, held_fence=None, held_for="").to_bytes())
    assert (plain.held_fence, plain.held_for) == (None, "")
