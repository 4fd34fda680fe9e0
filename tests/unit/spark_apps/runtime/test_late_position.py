"""The test fault that makes a slot pass a handoff's position (tests.support.late_position), and the
follower's seam it reaches a slot through (Follower.seen_control)."""

from baton.caps import compute_cap
from baton.records import ControlRecord, Slot
from spark_apps.runtime.coordination.follower import Follower
from tests.support import late_position
from tests.support.late_position import FAULT_FILE, LatePositionFault

F1, F2 = {0: 10, 1: 20}, {0: 40, 1: 50}


def control(revision, fence=None, check_at=None):
    return ControlRecord(app="a", revision=revision, epoch=1, active=Slot.BLUE, fence=fence, check_at=check_at)


def test_without_the_file_every_record_is_taken_as_written(tmp_path):
    fault = LatePositionFault(tmp_path / "fault-late-position")
    rec = control(2, fence=F1)
    assert fault.seen(control(1), rec) is rec


def test_the_named_position_stays_unseen_until_another_is_set_and_the_file_is_used_once(tmp_path):
    path = tmp_path / "fault-late-position"
    path.write_text("fence\n")
    fault = LatePositionFault(path)
    current = control(1)
    unseen = fault.seen(current, control(2, fence=F1))
    assert unseen.fence is None and unseen.revision == 2 and not path.exists()
    assert compute_cap(unseen, Slot.BLUE, None, 2) is None  # the active reads on past F1
    again = fault.seen(unseen, control(3, fence=F1))  # the record rewritten for another reason: still unseen
    assert again.fence is None
    lifted = fault.seen(again, control(4))  # the handoff lifts F1 and plans F2: both are seen
    assert lifted.fence is None
    assert fault.seen(lifted, control(5, fence=F2)).fence == F2
    assert fault.seen(control(5, fence=F2), control(6, fence=F1)).fence == F1  # used once: F1 again is seen


def test_a_check_position_is_unseen_only_when_the_file_names_it(tmp_path):
    path = tmp_path / "fault-late-position"
    path.write_text("check_at")
    fault = LatePositionFault(path)
    assert fault.seen(control(1), control(2, fence=F1)).fence == F1 and path.exists()  # no new check position
    assert fault.seen(control(2, fence=F1), control(3, fence=F1, check_at=F2)).check_at is None
    assert not path.exists()
    path.write_text("offsets")
    assert fault.seen(control(1), control(2, fence=F2)).fence == F2 and not path.exists()  # names neither: removed


def test_a_file_naming_both_is_used_once_for_each(tmp_path):
    path = tmp_path / "fault-late-position"
    path.write_text("check_at\nfence\n")
    fault = LatePositionFault(path)
    assert fault.seen(control(1), control(2, check_at=F1)).check_at is None
    assert path.read_text().split() == ["fence"]
    assert fault.seen(control(3), control(4, check_at=F2)).check_at == F2  # check_at used already
    assert fault.seen(control(4, check_at=F2), control(5, fence=F2)).fence is None and not path.exists()


class Msg:
    def __init__(self, rec):
        self.rec = rec

    def topic(self):
        return "control"

    def key(self):
        return self.rec.key()

    def value(self):
        return self.rec.to_bytes()


def follower(tmp_path):
    f = Follower("127.0.0.1:1", "a", Slot.BLUE, "commits", 2, tmp_path / "cap.json", control_topic="control")
    f.control = control(1)
    return f


def test_a_follower_takes_control_records_as_written(tmp_path):
    (tmp_path / FAULT_FILE).write_text("fence\n")  # no effect: the fault is not installed
    f = follower(tmp_path)
    try:
        rec = control(2, fence=F1)
        assert f.seen_control(rec) is rec
        f._apply(Msg(rec))
        assert f.control.fence == F1 and (tmp_path / FAULT_FILE).exists()
    finally:
        f.stop()


def test_installed_the_fault_reaches_a_follower_through_its_seam(tmp_path, monkeypatch):
    monkeypatch.setattr(Follower, "seen_control", late_position.seen_control)  # what install() does
    (tmp_path / FAULT_FILE).write_text("fence\n")
    f = follower(tmp_path)
    try:
        f._apply(Msg(control(2, fence=F1)))
        assert f.control.revision == 2 and f.control.fence is None and not (tmp_path / FAULT_FILE).exists()
        f._apply(Msg(control(3)))
        f._apply(Msg(control(4, fence=F2)))
        assert f.control.fence == F2
    finally:
        f.stop()
