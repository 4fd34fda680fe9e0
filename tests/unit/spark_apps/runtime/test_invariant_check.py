"""The standby's side of the invariant gate (spark_apps.runtime.invariant_check): it answers each request
once, only as the standby; a read that fails is tried again later without holding the slot's loop, and
after the last attempt the answer is "unchecked", never a violation. The read itself (check_state_at)
runs on a real checkpoint in tests/integration/spark_apps/apps/test_click_counts_ttl.py and through
baton_reprocess in tests/e2e/test_reprocess.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from baton.apps import load_app
from baton.records import ControlRecord, Slot
from spark_apps.runtime import invariant_check
from spark_apps.runtime.invariant_check import READ_ATTEMPTS, InvariantsOnRequest

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
    follower, published, reads = Follower(), [], []
    monkeypatch.setattr(invariant_check, "last_committed_batch", lambda checkpoint: 9)
    monkeypatch.setattr(invariant_check, "background_jobs", lambda spark: __import__("contextlib").nullcontext())

    def check_state_at(spark, module, checkpoint, batch_id):
        outcome = reads.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    monkeypatch.setattr(invariant_check, "check_state_at", check_state_at)
    checker = InvariantsOnRequest(APP, Slot.GREEN, tmp_path / "checkpoint", follower, spark=lambda: object(),
                                  publish=lambda: published.append(checker.answer))
    return SimpleNamespace(checker=checker, follower=follower, published=published, reads=reads)


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
        "run:1", False, 9, 100, 1, ("user 7: count 0",))
    slot.follower.ask("run:2")  # a retry of the gate asks again
    slot.reads.append((100, 0, []))
    slot.checker.maybe_check()
    assert [a.asked for a in slot.published] == ["run:1", "run:2"] and slot.published[-1].ok


def test_a_failed_read_is_tried_again_later_and_the_last_failure_is_no_verdict(slot, monkeypatch):
    slot.follower.ask("run:1")
    slot.reads.extend([RuntimeError("file moved\nCaused by: java.io.FileNotFoundException: 10.changelog")]
                      * READ_ATTEMPTS)
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
