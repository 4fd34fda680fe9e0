"""Corrected output goes out beside the new active's batches (spark_apps.runtime.sink.correction): the state
read at batch K is published less the keys a batch after K emitted while it was read, never before the
slot stands at the fence it took over at, and once."""

import contextlib
from pathlib import Path

import pytest

from baton.apps import AppDefinition, TopicRef
from baton.generations import SlotPaths
from baton.records import CommitMarker, ControlRecord, Handoff, Slot
from spark_apps.runtime.sink import corrected_output
from spark_apps.runtime.sink.batch_sink import RoleGatedSink
from spark_apps.runtime.sink.corrected_output import CorrectedOutput
from spark_apps.runtime.sink.correction import EmittedKeys, leave_out

F = {0: 100, 1: 100}


class Emitter:
    def __init__(self, last=None):
        self.holding, self.epoch, self.published, self.last = False, None, [], last

    def acquire(self, epoch):
        self.holding, self.epoch = True, epoch

    @property
    def corrected(self):
        return bool(self.published)

    def emit_correction(self, rows):
        self.published.append(rows)


class Follower:
    def __init__(self, control):
        self.control = control

    def snapshot(self):
        return self.control, None


def control(correct_epoch=2):
    return ControlRecord(
        app="a",
        revision=3,
        epoch=2,
        active=Slot.GREEN,
        correct_epoch=correct_epoch,
        handoff=Handoff("run", 1, dict(F), Slot.GREEN),
    )


@pytest.fixture
def slot(monkeypatch):
    """The new active's sink (its lock, role and writer); `at` (set on it here) maps each committed
    batch of its checkpoint to where the batch ended."""
    app = AppDefinition(
        name="a",
        module="spark_apps.apps.click_counts",
        version="v2",
        input=TopicRef(topic="in", partitions=2),
        output=TopicRef(topic="out", partitions=2),
    )
    sink = RoleGatedSink(
        app,
        Slot.GREEN,
        SlotPaths(Path("/nowhere")),
        Follower(control()),
        Emitter(),
        EmittedKeys(),
        mark=lambda phase: None,
    )
    sink.at = {5: {0: 100, 1: 100}}
    monkeypatch.setattr(corrected_output, "last_committed_batch", lambda checkpoint: max(sink.at))
    monkeypatch.setattr(corrected_output, "read_offset_log", lambda checkpoint, batch: sink.at[batch])
    monkeypatch.setattr(corrected_output, "background_jobs", lambda spark: contextlib.nullcontext())
    return sink


def correct(sink):
    CorrectedOutput(sink).maybe_publish(spark=object())


def test_keys_a_batch_emitted_while_the_state_was_read_are_left_out(slot, monkeypatch):
    slot.emitted_keys.note(5, [(b"user3", b"at F")])  # batch 5 itself: the state read includes it
    slot.emitted_keys.note(6, [(b"user4", b'{"count": 7}')])  # emitted, Spark's commit of it still to come
    slot.emitter.last = CommitMarker(
        app="a", generation=1, epoch=2, slot=Slot.GREEN, batch_id=6, emitted={0: 110, 1: 100}
    )

    def state_output(spark, checkpoint, batch, module):
        assert batch == 5
        slot.emitted_keys.note(7, [(b"user1", b'{"count": 9}')])  # the query's next batch, meanwhile
        return [
            (b"user1", b'{"count": 8}'),
            (b"user2", b'{"count": 4}'),
            (b"user3", b'{"count": 2}'),
            (b"user4", b'{"count": 6}'),
        ]

    monkeypatch.setattr(corrected_output, "state_output", state_output)
    correct(slot)
    assert slot.emitter.published == [[(b"user2", b'{"count": 4}'), (b"user3", b'{"count": 2}')]]
    assert slot.emitted_keys.after(None) == set()  # nothing more to remember
    correct(slot)
    assert len(slot.emitter.published) == 1  # once


def test_no_correction_before_the_slot_stands_at_the_fence_or_when_none_was_asked(slot, monkeypatch):
    monkeypatch.setattr(corrected_output, "state_output", lambda *a: pytest.fail("read the state short of the fence"))
    slot.at = {4: {0: 100, 1: 90}}  # a trailing new active, on its way to F
    correct(slot)
    slot.at = {5: {0: 120, 1: 130}}
    slot.follower = Follower(control(correct_epoch=0))  # a plain cutover
    correct(slot)
    assert slot.emitter.published == []


def test_output_a_previous_start_emitted_past_the_committed_state_holds_the_correction_back(slot, monkeypatch):
    """Killed after batch 6's output was committed and before Spark committed batch 6: the restarted
    slot runs batch 6 again (its output skipped), so K is 5, and batch 6's keys are neither in K's state
    nor noted: no correction until batch 6 is committed."""
    monkeypatch.setattr(corrected_output, "state_output", lambda *a: [(b"user1", b"x")])
    slot.emitter = Emitter(
        last=CommitMarker(app="a", generation=1, epoch=2, slot=Slot.GREEN, batch_id=6, emitted={0: 130, 1: 120})
    )
    correct(slot)
    assert slot.emitter.published == []
    slot.at[6] = {0: 130, 1: 120}  # batch 6 committed
    correct(slot)
    assert slot.emitter.published == [[(b"user1", b"x")]]


def test_leave_out_keeps_every_row_when_nothing_was_emitted_since():
    rows = [(b"a", b"1"), (b"b", b"2")]
    assert leave_out(rows, set()) == rows
    assert leave_out(rows, {b"b", b"z"}) == [(b"a", b"1")]


def test_a_marker_carries_the_correction_on_and_reads_back():
    m = CommitMarker(app="a", generation=1, epoch=3, slot=Slot.GREEN, batch_id=9, emitted=F, corrected_epoch=2)
    assert CommitMarker.from_bytes(m.to_bytes()) == m
    old = CommitMarker(app="a", generation=1, epoch=1, slot=Slot.BLUE, batch_id=9, emitted=F).to_bytes()
    assert CommitMarker.from_bytes(old.replace(b',"corrected_epoch":0', b"")).corrected_epoch == 0  # an older writer's


def test_a_state_image_is_published_as_it_stands_without_reading_the_state(slot, monkeypatch):
    """The image (spark_apps.runtime.state.state_image) holds every key's newest record through the last batch
    the sink ran: once that batch stands at or past F, it goes out under the batch lock at once, less
    the keys emitted since the cutover (their records are downstream already)."""
    monkeypatch.setattr(corrected_output, "state_output", lambda *a: pytest.fail("read the state"))
    slot.at = {4: {0: 100, 1: 90}, 5: {0: 100, 1: 100}, 6: {0: 110, 1: 100}}
    slot.image.arm(after=3)
    assert slot.image.base(3, [(b"user1", b"3"), (b"user2", b"3"), (b"user3", b"3")])
    slot.image.fold(4, [(b"user1", b"4")])
    correct(slot)  # batch 4 ends short of F
    assert slot.emitter.published == [] and slot.image.ready
    slot.image.fold(5, [(b"user2", b"5")])  # the batch ending at F (its output emitted by the old active)
    slot.image.fold(6, [(b"user3", b"6")])  # the new active's first emitted batch
    slot.emitted_keys.note(6, [(b"user3", b"6")])
    correct(slot)
    assert slot.emitter.published == [[(b"user1", b"4"), (b"user2", b"5")]]
    assert not slot.image.collecting and slot.emitted_keys.after(None) == set()
    correct(slot)
    assert len(slot.emitter.published) == 1  # once


def test_an_image_no_correction_will_use_is_dropped(slot, monkeypatch):
    slot.follower = Follower(control(correct_epoch=0))  # the slot became the active by a plain cutover
    slot.image.arm(after=3)
    correct(slot)
    assert not slot.image.collecting and slot.emitter.published == []

    now = [0.0]
    slot.image.clock = lambda: now[0]
    slot.follower = Follower(ControlRecord(app="a", revision=3, epoch=1, active=Slot.BLUE))  # still the standby
    slot.image.arm(after=3)
    correct(slot)
    assert slot.image.collecting
    now[0] += slot.image.keep_s + 1  # a staged reprocess that was not handed over
    correct(slot)
    assert not slot.image.collecting


def test_a_large_image_waits_for_the_new_actives_batches_to_emit_most_of_its_keys(slot, monkeypatch):
    """Every record of the correction goes out under the batch lock while the output waits: an image
    with more than IMAGE_PUBLISH_KEYS keys left waits (up to IMAGE_WAIT_S) while the new active's batches
    emit them."""
    monkeypatch.setattr(corrected_output, "IMAGE_PUBLISH_KEYS", 1)
    now = [0.0]
    fixer = CorrectedOutput(slot, clock=lambda: now[0])
    slot.image.arm(after=5)
    assert slot.image.base(5, [(b"user1", b"5"), (b"user2", b"5"), (b"user3", b"5")])
    fixer.maybe_publish(spark=object())
    assert slot.emitter.published == []  # 3 keys left
    slot.at[6] = {0: 110, 1: 100}
    slot.image.fold(6, [(b"user1", b"6"), (b"user2", b"6")])
    slot.emitted_keys.note(6, [(b"user1", b"6"), (b"user2", b"6")])
    fixer.maybe_publish(spark=object())
    assert slot.emitter.published == [[(b"user3", b"5")]]

    waited = CorrectedOutput(slot, clock=lambda: now[0])
    slot.emitter = Emitter()
    slot.image.arm(after=6)
    assert slot.image.base(6, [(b"user1", b"6"), (b"user2", b"6")])
    waited.maybe_publish(spark=object())
    now[0] += corrected_output.IMAGE_WAIT_S
    assert slot.emitter.published == []
    waited.maybe_publish(spark=object())
    assert slot.emitter.published == [[(b"user1", b"6"), (b"user2", b"6")]]  # waited long enough: all of it
