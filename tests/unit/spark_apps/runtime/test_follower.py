"""The cap each slot's source reads up to: invariant 2 (the standby never passes the active)."""

import json

from baton.records import CommitMarker, ControlRecord, Slot
from spark_apps.runtime.follower import compute_cap, write_cap_file


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
