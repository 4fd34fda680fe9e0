"""The standby's side of the invariant gate (spark_apps.runtime.state.invariant_check): it answers each request
once, only as the standby; a read that fails is tried again later without holding the slot's loop, and
after the last attempt the answer is "unchecked", never a violation. The read itself (check_state_at)
runs on a real checkpoint in tests/integration/spark_apps/apps/test_click_counts_ttl.py and through
baton_reprocess in tests/e2e/test_reprocess.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from baton.apps import load_app
from baton.generations import SlotPaths
from baton.records import ControlRecord, Slot
from spark_apps.runtime.sink.batch_sink import RoleGatedSink
from spark_apps.runtime.state import invariant_check
from spark_apps.runtime.state.invariant_check import READ_ATTEMPTS, InvariantsOnRequest

APP = load_app("click_counts")


class Follower:
    def __init__(self):
        self.control = ControlRecord(app=APP.name, revision=1, epoch=1, active=Slot.BLUE)

    def snapshot(self):
        return self.control, None

    def ask(self, asked: str, active: Slot = Slot.BLUE) -> None:
        self.control = ControlRecord(app=APP.name, revision=2, epoch=1, active=active, invariants_asked=asked)


@pytest.fixture
def slot(monkeypatch, tmp_path):
    """The green slot's checker, its reads counted; `reads` says what each read returns or raises."""
    follower, published, reads, calls = Follower(), [], [], []
    monkeypatch.setattr(invariant_check, "last_committed_batch", lambda checkpoint: 9)
    monkeypatch.setattr(invariant_check, "background_jobs", lambda spark: __import__("contextlib").nullcontext())

    def check_state_at(spark, module, checkpoint, batch_id, records_up_to=0):
        calls.append((batch_id, records_up_to))
        outcome = reads.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return (*outcome, None) if len(outcome) == 3 else outcome

    monkeypatch.setattr(invariant_check, "check_state_at", check_state_at)
    checker = InvariantsOnRequest(
        APP,
        Slot.GREEN,
        tmp_path / "checkpoint",
        follower,
        spark=lambda: object(),
        publish=lambda: published.append(checker.answer),
    )
    return SimpleNamespace(checker=checker, follower=follower, published=published, reads=reads, calls=calls)


def test_each_request_is_answered_once_and_only_by_the_standby(slot):
    slot.checker.maybe_check()
    assert slot.published == []  # nothing asked
    slot.follower.ask("run:1", active=Slot.GREEN)
    slot.checker.maybe_check()
    assert slot.published == []  # the active is never asked: its batches carry the output
    slot.follower.ask("run:1")
    slot.reads.append((100, 1, ["user 7: count 0"]))
    slot.checker.maybe_check()
    slot.checker.maybe_check()
    [answer] = slot.published
    assert (answer.asked, answer.ok, answer.batch_id, answer.rows, answer.violations, answer.examples) == (
        "run:1",
        False,
        9,
        100,
        1,
        ("user 7: count 0",),
    )
    slot.follower.ask("run:2")  # a retry of the gate asks again
    slot.reads.append((100, 0, []))
    slot.checker.maybe_check()
    assert [a.asked for a in slot.published] == ["run:1", "run:2"] and slot.published[-1].ok


def test_a_failed_read_is_tried_again_later_and_the_last_failure_is_no_verdict(slot, monkeypatch):
    slot.follower.ask("run:1")
    slot.reads.extend(
        [RuntimeError("file moved\nCaused by: java.io.FileNotFoundException: 10.changelog")] * READ_ATTEMPTS
    )
    slot.checker.maybe_check()
    slot.checker.maybe_check()  # within RETRY_AFTER_S of the failure: no read
    assert len(slot.reads) == READ_ATTEMPTS - 1 and slot.published == []
    monkeypatch.setattr(invariant_check, "RETRY_AFTER_S", 0.0)
    for _ in range(READ_ATTEMPTS):
        slot.checker.maybe_check()
    [answer] = slot.published
    assert answer.unchecked and not answer.ok and "FileNotFoundException: 10.changelog" in answer.error


def test_an_app_without_check_state_passes_with_a_note(slot, monkeypatch):
    monkeypatch.setattr(invariant_check.importlib, "import_module", lambda name: SimpleNamespace())
    slot.follower.ask("run:1")
    slot.checker.maybe_check()
    [answer] = slot.published
    assert answer.ok and "defines no check_state" in answer.note and slot.reads == []


def image_sink(slot, tmp_path, last_batch):
    sink = RoleGatedSink(APP, Slot.GREEN, SlotPaths(tmp_path), slot.follower, None, None, mark=lambda phase: None)
    sink.last_batch = last_batch
    slot.checker.sink = sink
    return sink


def test_an_app_whose_output_is_its_state_gets_its_state_image_from_the_same_read(slot, monkeypatch, tmp_path):
    """click_counts keeps a state image (spark_apps.runtime.state.state_image): the check reads the state of
    the last batch the sink ran, once Spark committed it, and the image takes its records as its base,
    newer records of the batches after it on top."""
    committed = [9]
    monkeypatch.setattr(invariant_check, "last_committed_batch", lambda checkpoint: committed[0])
    sink = image_sink(slot, tmp_path, last_batch=10)  # batch 10 ran; Spark's commit of it is still to come
    slot.follower.ask("run:1")
    slot.checker.maybe_check()
    assert slot.published == [] and slot.calls == [] and sink.image.after == 10  # armed, waiting for the commit
    sink.image.fold(11, [(b"user1", b"11")])  # the next batch, meanwhile
    committed[0] = 11
    slot.reads.append((2, 0, [], [(b"user1", b"10"), (b"user2", b"10")]))
    slot.checker.maybe_check()
    [answer] = slot.published
    assert answer.ok and answer.batch_id == 10 and slot.calls == [(10, sink.image.max_keys)]
    assert sink.image.ready and sorted(sink.image.records_less(set())) == [(b"user1", b"11"), (b"user2", b"10")]


def test_a_failed_read_drops_the_image_and_the_next_attempt_starts_one_at_a_later_batch(slot, monkeypatch, tmp_path):
    monkeypatch.setattr(invariant_check, "RETRY_AFTER_S", 0.0)
    sink = image_sink(slot, tmp_path, last_batch=9)
    slot.follower.ask("run:1")
    slot.reads.extend([RuntimeError("file moved"), (1, 0, [], None)])
    slot.checker.maybe_check()
    assert slot.published == [] and not sink.image.collecting
    sink.last_batch = 9  # (the committed batch is 9 in this fixture)
    slot.checker.maybe_check()
    [answer] = slot.published
    assert answer.ok and slot.calls == [(9, sink.image.max_keys)] * 2
    assert not sink.image.collecting  # the read brought no records (too many keys): no image, the correction reads


def test_an_app_whose_output_is_not_its_state_keeps_no_image(slot, monkeypatch, tmp_path):
    monkeypatch.setattr(
        invariant_check.importlib,
        "import_module",
        lambda name: SimpleNamespace(check_state=lambda state: state, state_output=lambda state: state),
    )  # no OUTPUT_IS_STATE
    sink = image_sink(slot, tmp_path, last_batch=12)
    slot.follower.ask("run:1")
    slot.reads.append((5, 0, []))
    slot.checker.maybe_check()
    assert slot.published[0].batch_id == 9 and slot.calls == [(9, 0)] and not sink.image.collecting
