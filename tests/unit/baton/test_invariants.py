"""The reprocess's invariant gate's pure parts (baton.invariants): asking through the control record, and
finding the standby's answer to this request, from the generation being judged."""

from baton.invariants import answer_check, answer_to, answered, ask_invariants, violations_text
from baton.records import ControlRecord, InvariantsCheck, Role, Slot, SlotState, StatusRecord


def status(generation: int, answer: InvariantsCheck | None, batch_id: int = -1, ts_ms: int = 0) -> StatusRecord:
    return StatusRecord(
        app="a",
        slot=Slot.GREEN,
        state=SlotState.RUNNING,
        role=Role.STANDBY,
        epoch_seen=1,
        generation=generation,
        invariants=answer,
        batch_id=batch_id,
        ts_ms=ts_ms,
    )


def test_asking_writes_the_request_once_and_a_new_request_asks_again():
    rec = ControlRecord(app="a", revision=1, epoch=1, active=Slot.BLUE)
    asked = ask_invariants("run:1")(rec)
    assert asked.invariants_asked == "run:1"
    assert ask_invariants("run:1")(asked) is asked  # a retried write changes nothing
    assert ask_invariants("run:2")(asked).invariants_asked == "run:2"
    assert answered("run:1")(asked).invariants_asked == ""
    newer = ask_invariants("run:2")(asked)
    assert answered("run:1")(newer) is newer  # a newer request stays


def test_the_answer_is_this_requests_from_the_generation_being_judged():
    older = InvariantsCheck(asked="run:1", ok=True, batch_id=3)
    mine = InvariantsCheck(asked="run:2", ok=False, batch_id=9, rows=100, violations=1, examples=("user 7: count 0",))
    history = [status(1, older), status(0, InvariantsCheck(asked="run:2", ok=True)), status(1, mine), status(1, mine)]
    assert answer_to(history, "run:2", generation=1) == mine
    assert answer_to(history, "run:2", generation=0).ok  # the previous generation's launch answered it too
    assert answer_to(history, "run:3", generation=1) is None
    assert answer_to([status(1, None)], "run:2", generation=1) is None
    assert violations_text(mine) == "1 violation(s) in 100 state rows of batch 9, e.g. user 7: count 0"


def test_the_wait_is_met_by_any_answer_and_meanwhile_says_where_the_slot_stands():
    unreadable = InvariantsCheck(asked="run:2", ok=False, unchecked=True, error="moved")
    assert answer_check([status(1, unreadable)], "run:2", 1, now_ms=0).met  # the step judges the verdict
    assert answer_check([], "run:2", 1, now_ms=0).message == "no status from generation 1 yet"
    waiting = answer_check(
        [status(1, None, batch_id=40, ts_ms=1_000), status(0, unreadable, batch_id=99, ts_ms=9_000)],
        "run:2",
        1,
        now_ms=13_000,
    )
    assert waiting.waiting
    assert waiting.message == "no answer yet; generation 1 last reported running at batch 40, 12 s ago"
