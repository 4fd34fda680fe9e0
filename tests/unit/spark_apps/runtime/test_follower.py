"""The cap each slot's source reads up to: invariant 2 (the standby never passes the active)."""

import json

from baton.caps import compute_cap
from baton.records import CommitMarker, ControlRecord, Slot
from spark_apps.runtime.coordination.applied_cap import CAP_WRITE_KEY
from spark_apps.runtime.coordination.follower import write_cap_file


def control(active=Slot.BLUE, fence=None):
    return ControlRecord(app="a", revision=1, epoch=1, active=active, fence=fence)


def marker(emitted):
    return CommitMarker(app="a", generation=0, epoch=1, slot=Slot.BLUE, batch_id=3, emitted=emitted)


def test_active_without_fence_reads_freely():
    assert compute_cap(control(), Slot.BLUE, marker({0: 5, 1: 7}), 2) is None


def test_active_stops_at_the_fence():
    assert compute_cap(control(fence={0: 10, 1: 20}), Slot.BLUE, marker({0: 5, 1: 7}), 2) == {0: 10, 1: 20}


def test_standby_follows_the_active_emitted_position_on_every_partition():
    assert compute_cap(control(), Slot.GREEN, marker({0: 5, 1: 7}), 3) == {0: 5, 1: 7, 2: 0}


def test_standby_with_nothing_emitted_reads_nothing():
    assert compute_cap(control(), Slot.GREEN, None, 2) == {0: 0, 1: 0}
    assert compute_cap(None, Slot.GREEN, None, 2) == {0: 0, 1: 0}


def test_standby_under_a_fence_still_never_passes_the_active():
    # The active has not reached the fence yet: the standby waits at what was emitted.
    assert compute_cap(control(fence={0: 10, 1: 20}), Slot.GREEN, marker({0: 5, 1: 7}), 2) == {0: 5, 1: 7}
    # Once the active emitted up to (or past, on a partition) the fence, the standby stops at the fence.
    assert compute_cap(control(fence={0: 10, 1: 20}), Slot.GREEN, marker({0: 12, 1: 20}), 2) == {0: 10, 1: 20}


def test_cap_file_is_written_whole_and_removed_for_no_cap(tmp_path):
    path = tmp_path / "cap.json"
    write_cap_file(path, {1: 7, 0: 5})
    assert json.loads(path.read_text()) == {"0": 5, "1": 7}
    assert list(tmp_path.iterdir()) == [path]  # no temp file left behind
    write_cap_file(path, None)
    assert not path.exists()


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def follower(tmp_path, clock, pace_s=2.0, slot=Slot.GREEN):
    from spark_apps.runtime.coordination.follower import Follower

    f = Follower("127.0.0.1:1", "a", slot, "commits", 2, tmp_path / "cap.json", standby_pace_s=pace_s, clock=clock)
    f.control = control()
    return f


def cap_in(tmp_path):
    return {int(p): o for p, o in json.loads((tmp_path / "cap.json").read_text()).items() if p != CAP_WRITE_KEY}


def test_a_standby_moves_up_to_new_markers_at_its_pace(tmp_path):
    clock = Clock()
    f = follower(tmp_path, clock)
    try:
        f.marker = marker({0: 5, 1: 7})
        f._publish_cap(paced=True)  # the first cap is written at once
        f.marker = marker({0: 9, 1: 9})
        clock.t += 1.0
        f._publish_cap(paced=True)  # held: one second since the last write
        assert cap_in(tmp_path) == {0: 5, 1: 7} and f._pending
        clock.t += 1.0
        f._publish_cap(paced=True)  # the pace has passed: the held cap goes out
        assert cap_in(tmp_path) == {0: 9, 1: 9} and not f._pending
    finally:
        f._consumer.close()


def test_a_fence_or_role_change_reaches_a_paced_standby_at_once(tmp_path):
    clock = Clock()
    f = follower(tmp_path, clock)
    try:
        f.marker = marker({0: 5, 1: 7})
        f._publish_cap(paced=True)
        f.marker, f.control = marker({0: 12, 1: 20}), control(fence={0: 10, 1: 20})
        clock.t += 0.1
        f._publish_cap(paced=False)  # a control record changed
        assert cap_in(tmp_path) == {0: 10, 1: 20}
        f.control = control(active=Slot.GREEN)
        f._publish_cap(paced=False)  # now the active: no cap at all
        assert not (tmp_path / "cap.json").exists()
    finally:
        f._consumer.close()


def test_the_active_is_never_paced(tmp_path):
    clock = Clock()
    f = follower(tmp_path, clock, slot=Slot.BLUE)
    try:
        f.control = control(fence={0: 10, 1: 20})
        f._publish_cap(paced=True)
        f.control = control(fence={0: 30, 1: 40})
        f._publish_cap(paced=True)
        assert cap_in(tmp_path) == {0: 30, 1: 40}
    finally:
        f._consumer.close()


def test_under_a_fence_a_standby_follows_every_marker_at_once(tmp_path):
    # The cutover waits for the standby to stand at F: the pace would add up to standby_pace_s to the
    # handoff's output gap.
    clock = Clock()
    f = follower(tmp_path, clock)
    try:
        f.control = control(fence={0: 10, 1: 20})
        f.marker = marker({0: 5, 1: 7})
        f._publish_cap(paced=True)
        f.marker = marker({0: 10, 1: 20})
        clock.t += 0.1
        f._publish_cap(paced=True)  # a new marker, well within the pace: taken at once
        assert cap_in(tmp_path) == {0: 10, 1: 20} and not f._pending
    finally:
        f._consumer.close()


def test_a_paced_standby_tells_its_reader_when_the_cap_moves_next_and_a_fence_takes_that_back_first(
    tmp_path, monkeypatch
):
    """pace_hint.py: the reader fetches shortly before the hinted time; under a fence (the cutover waits for the
    standby at F) or as the active there is no hint, and the hint is gone before such a cap is written."""
    from spark_apps.runtime.coordination import follower as follower_module
    from spark_apps.runtime.source.pace_hint import hint_path, read_pace_hint

    monkeypatch.setattr(follower_module.time, "time", lambda: 5000.0)
    clock = Clock()
    f = follower(tmp_path, clock)
    cap = tmp_path / "cap.json"
    try:
        f.marker = marker({0: 5, 1: 7})
        f._publish_cap(paced=True)
        assert read_pace_hint(str(cap)) == 5002.0  # written now, so not before the pace has passed
        f.marker = marker({0: 9, 1: 9})
        clock.t += 1.0
        f._publish_cap(paced=True)  # held by the pace: the hint stands
        assert read_pace_hint(str(cap)) == 5002.0
        order = []
        real_write_cap = follower_module.write_cap_file
        monkeypatch.setattr(
            follower_module,
            "write_cap_file",
            lambda path, c, write="": (order.append(("cap", hint_path(path).exists())), real_write_cap(path, c, write))[
                1
            ],
        )
        f.control = control(fence={0: 10, 1: 20})
        f._publish_cap(paced=False)
        assert order == [("cap", False)]  # the hint was removed before the fenced cap went out
        assert read_pace_hint(str(cap)) is None and cap_in(tmp_path) == {0: 9, 1: 9}
        f.control = control(active=Slot.GREEN)
        f._publish_cap(paced=False)
        assert not hint_path(cap).exists() and not cap.exists()
    finally:
        f._consumer.close()


def test_an_unpaced_standby_gives_no_hint(tmp_path):
    from spark_apps.runtime.source.pace_hint import hint_path

    f = follower(tmp_path, Clock(), pace_s=0.0)
    try:
        f.marker = marker({0: 5, 1: 7})
        f._publish_cap(paced=True)
        assert cap_in(tmp_path) == {0: 5, 1: 7} and not hint_path(tmp_path / "cap.json").exists()
    finally:
        f._consumer.close()


def control_checking(check, active=Slot.BLUE, fence=None):
    return ControlRecord(app="a", revision=1, epoch=1, active=active, fence=fence, check_at=check)


def test_a_check_position_is_a_batch_boundary_for_both_slots_not_a_stop():
    P = {0: 10, 1: 20}
    # The active reads up to P until it has emitted P, then on freely (or up to a fence).
    assert compute_cap(control_checking(P), Slot.BLUE, marker({0: 5, 1: 7}), 2) == P
    assert compute_cap(control_checking(P), Slot.BLUE, marker(P), 2) is None
    assert compute_cap(control_checking(P, fence={0: 30, 1: 30}), Slot.BLUE, marker({0: 5, 1: 7}), 2) == P
    # The standby follows the active and stops at P until its own batch has ended there.
    assert compute_cap(control_checking(P), Slot.GREEN, marker({0: 15, 1: 25}), 2, processed={0: 5, 1: 7}) == P
    assert compute_cap(control_checking(P), Slot.GREEN, marker({0: 15, 1: 25}), 2, processed=P) == {0: 15, 1: 25}
    # Never past the active, check or not.
    assert compute_cap(control_checking(P), Slot.GREEN, marker({0: 8, 1: 25}), 2, processed={}) == {0: 8, 1: 20}


def test_only_the_batch_that_passes_a_check_position_rewrites_the_cap(tmp_path):
    clock = Clock()
    f = follower(tmp_path, clock)
    written = []
    f._publish_cap = lambda paced=False: written.append(dict(f.processed))
    try:
        f.control = control_checking({0: 10, 1: 20})
        f.note_processed({0: 5, 1: 7})
        f.note_processed({0: 10, 1: 20})  # ends at P: the standby's cap on P lifts now
        f.note_processed({0: 15, 1: 25})  # later batches: nothing to lift
        assert written == [{0: 10, 1: 20}]
    finally:
        f._consumer.close()


def test_a_first_batch_as_the_active_reads_at_most_the_previous_actives_last_batch():
    taken_over = ControlRecord(app="a", revision=2, epoch=2, active=Slot.GREEN)
    last = {0: 300, 1: 5}  # the previous active's last batch, per partition
    at_f = {0: 10_000, 1: 20_000}
    assert compute_cap(taken_over, Slot.GREEN, marker(at_f), 2, processed=at_f, first_batch=last) == {
        0: 10_000 + 1000,
        1: 20_000 + 1000,
    }  # at least FIRST_BATCH_FLOOR on each partition
    big = {0: 20_000, 1: 30_000}
    assert compute_cap(taken_over, Slot.GREEN, marker(at_f), 2, processed=at_f, first_batch=big) == {
        0: 30_000,
        1: 50_000,
    }
    fenced = ControlRecord(app="a", revision=2, epoch=2, active=Slot.GREEN, fence={0: 10_500, 1: 60_000})
    assert compute_cap(fenced, Slot.GREEN, marker(at_f), 2, processed=at_f, first_batch=big) == {0: 10_500, 1: 50_000}
    # Nothing processed yet (a fresh slot): no position to count from, no limit.
    assert compute_cap(taken_over, Slot.GREEN, marker(at_f), 2, processed=None, first_batch=big) is None


class Msg:
    def __init__(self, topic, key, value):
        self._t, self._k, self._v = topic, key, value

    def topic(self):
        return self._t

    def key(self):
        return self._k

    def value(self):
        return self._v

    def error(self):
        return None


def test_a_slot_that_takes_the_active_role_caps_its_first_batch_then_reads_freely(tmp_path):
    clock = Clock()
    f = follower(tmp_path, clock)
    try:
        for emitted in ({0: 100, 1: 100}, {0: 150, 1: 2_100}):  # the active's last batch: 50 + 2000
            f._apply(Msg("commits", b"a", marker(emitted).to_bytes()))
        assert f.last_batch == {0: 50, 1: 2000}
        f.note_processed({0: 150, 1: 2_100})  # the standby stands where the active stopped
        f.control = ControlRecord(app="a", revision=2, epoch=2, active=Slot.GREEN)
        f._publish_cap()  # the cutover record
        assert cap_in(tmp_path) == {0: 1_150, 1: 4_100}
        f.note_processed({0: 1_150, 1: 4_100}, emitted_epoch=2)  # its first batch as the active is out
        assert not (tmp_path / "cap.json").exists()  # no cap from now on
        f.note_processed({0: 5_000, 1: 9_000}, emitted_epoch=2)
        assert not (tmp_path / "cap.json").exists()
    finally:
        f._consumer.close()


def handed_over(fence, epoch=2, active=Slot.GREEN):
    """The record after a cutover to green at `fence` (the handoff kept, the fence lifted)."""
    from baton.records import Handoff

    return ControlRecord(
        app="a", revision=3, epoch=epoch, active=active, handoff=Handoff("run", 1, dict(fence), Slot.GREEN)
    )


def test_a_new_active_short_of_its_handoffs_fence_reads_up_to_exactly_it_first():
    at_f = {0: 10_000, 1: 20_000}
    short = {0: 9_000, 1: 20_000}
    last = {0: 5_000, 1: 5_000}  # the previous active's last batch: the first-batch cap alone would pass F
    assert compute_cap(handed_over(at_f), Slot.GREEN, marker(at_f), 2, processed=short, first_batch=last) == at_f
    # Once there, its first batch as the active counts from F.
    assert compute_cap(handed_over(at_f), Slot.GREEN, marker(at_f), 2, processed=at_f, first_batch=last) == {
        0: 15_000,
        1: 25_000,
    }
    # The handoff's fence binds only the slot it went to, at the epoch it made.
    assert compute_cap(handed_over(at_f, epoch=3), Slot.GREEN, marker(at_f), 2, processed=short) is None
    assert compute_cap(handed_over(at_f, active=Slot.BLUE), Slot.BLUE, marker(at_f), 2, processed=short) is None


def test_reaching_the_handoffs_fence_lifts_that_cap(tmp_path):
    clock = Clock()
    f = follower(tmp_path, clock)
    try:
        at_f = {0: 150, 1: 2_100}
        f._apply(Msg("commits", b"a", marker({0: 100, 1: 100}).to_bytes()))
        f._apply(Msg("commits", b"a", marker(at_f).to_bytes()))  # the old active's last batch: 50 + 2000
        f.note_processed({0: 120, 1: 900})  # green trails F
        f.control = handed_over(at_f)
        f._publish_cap()  # the cutover record
        assert cap_in(tmp_path) == at_f
        f.note_processed(at_f)  # reached F: output skipped, not emitted
        assert cap_in(tmp_path) == {0: 1_150, 1: 4_100}  # now its first batch as the active
        f.note_processed({0: 1_150, 1: 4_100}, emitted_epoch=2)
        assert not (tmp_path / "cap.json").exists()
    finally:
        f._consumer.close()


def test_the_follower_waits_long_on_idle_fetches_and_short_while_a_handoff_is_under_way():
    from spark_apps.runtime.coordination.follower import HANDOFF_FETCH_WAIT_MS, IDLE_FETCH_WAIT_MS, fetch_wait_for

    assert HANDOFF_FETCH_WAIT_MS < IDLE_FETCH_WAIT_MS
    assert fetch_wait_for(None) == IDLE_FETCH_WAIT_MS
    assert fetch_wait_for(control()) == IDLE_FETCH_WAIT_MS
    assert fetch_wait_for(control(fence={0: 10})) == HANDOFF_FETCH_WAIT_MS
    checking = ControlRecord(app="a", revision=2, epoch=1, active=Slot.BLUE, check_at={0: 10})
    assert fetch_wait_for(checking) == HANDOFF_FETCH_WAIT_MS
