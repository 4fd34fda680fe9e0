"""A commit that fails after the role moved on is the writer being fenced, whatever error it got (Tansu
answers a commit it aborted with _TIMED_OUT): the slot rejoins as the standby instead of failing."""

from types import SimpleNamespace

import pytest

from baton.records import ControlRecord, Slot
from spark_apps.runtime.harness import Harness
from spark_apps.runtime.kafka_sink import WriterFenced


def harness_at(epoch: int):
    released = []
    control = ControlRecord(app="app", revision=3, epoch=epoch, active=Slot.GREEN)
    return SimpleNamespace(app=SimpleNamespace(name="app"), slot=Slot.BLUE,
                           follower=SimpleNamespace(snapshot=lambda: (control, None)),
                           emitter=SimpleNamespace(release=lambda: released.append(True))), released


def test_a_failed_commit_after_a_newer_epoch_began_is_a_fence():
    h, released = harness_at(epoch=3)
    with pytest.raises(WriterFenced, match="after epoch 3 began"):
        Harness.fenced_meanwhile(h, 2, RuntimeError("_TIMED_OUT"))
    assert released == [True]


def test_a_failed_commit_at_the_same_epoch_is_left_to_fail():
    h, released = harness_at(epoch=2)
    assert Harness.fenced_meanwhile(h, 2, RuntimeError("_TIMED_OUT")) is None  # the caller re-raises it
    assert released == []
