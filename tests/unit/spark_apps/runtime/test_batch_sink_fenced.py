"""A commit that fails after the role moved on is the writer being fenced, whatever error it got (Tansu
answers a commit it aborted with _TIMED_OUT): the slot rejoins as the standby instead of failing."""

from types import SimpleNamespace

import pytest

from baton.records import ControlRecord, Slot
from spark_apps.runtime.sink.batch_sink import RoleGatedSink
from spark_apps.runtime.sink.kafka_sink import WriterFenced


def sink_seeing(*epochs: int):
    """A sink whose follower reports these epochs, one per look (the last one from then on)."""
    released, seen = [], list(epochs)

    def snapshot():
        epoch = seen.pop(0) if len(seen) > 1 else seen[0]
        return ControlRecord(app="app", revision=3, epoch=epoch, active=Slot.GREEN), None

    return SimpleNamespace(
        app=SimpleNamespace(name="app"),
        slot=Slot.BLUE,
        follower=SimpleNamespace(snapshot=snapshot),
        emitter=SimpleNamespace(release=lambda: released.append(True)),
    ), released


def test_a_failed_commit_after_a_newer_epoch_began_is_a_fence():
    h, released = sink_seeing(3)
    with pytest.raises(WriterFenced, match="after epoch 3 began"):
        RoleGatedSink.fenced_meanwhile(h, 2, RuntimeError("_TIMED_OUT"))
    assert released == [True]


def test_a_newer_epoch_the_follower_reads_only_after_the_failed_commit_is_a_fence():
    """The taker fences before it writes the control record, and a slot woken from a stall reads on
    from where its follower stopped: the new epoch comes a few looks later."""
    h, released = sink_seeing(2, 2, 2, 3)
    with pytest.raises(WriterFenced, match="after epoch 3 began"):
        RoleGatedSink.fenced_meanwhile(h, 2, RuntimeError("_TIMED_OUT"), wait_s=5)
    assert released == [True]


def test_a_failed_commit_at_the_same_epoch_is_left_to_fail():
    h, released = sink_seeing(2)
    assert (
        RoleGatedSink.fenced_meanwhile(h, 2, RuntimeError("_TIMED_OUT"), wait_s=0.3) is None
    )  # the caller re-raises it
    assert released == []
