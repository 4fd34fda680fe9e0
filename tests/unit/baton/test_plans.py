"""The plans a run's steps hand each other: plain JSON in XCom, typed on both ends; a wrong or missing
value is refused with the field's name, extra keys (a newer Baton's) are ignored."""

import json

import pytest

from baton.plans import (
    ConfirmPlan,
    Cutover,
    HandoffPlan,
    PlanError,
    ReprocessPlan,
    SlotRestart,
    StateCheckPlan,
    UpgradePlan,
    VersionChange,
)
from baton.records import Slot

EVERY_PLAN = [
    HandoffPlan(fence={0: 10, 1: 12}, epoch=3, from_slot=Slot.BLUE, to=Slot.GREEN),
    Cutover(epoch=4, active=Slot.GREEN, fence={0: 10}, at_ms=1_700_000_000_000),
    SlotRestart(
        slot=Slot.GREEN, since_ms=5, launch={"pid": 7, "log": "/l"}, version="v2", left={"rows": 3, "digest": "ab"}
    ),
    SlotRestart(slot=Slot.BLUE, since_ms=5, launch={}, generation=2),
    StateCheckPlan(position={0: 100}, active=Slot.BLUE, standby=Slot.GREEN, ahead_s=2.5),
    UpgradePlan(
        app="cc",
        version="v2",
        definition="/apps/cc/v2.yaml",
        active=Slot.BLUE,
        standby=Slot.GREEN,
        epoch=1,
        from_version="v1",
        policy="exact",
        preflight="ok",
    ),
    ReprocessPlan(
        app="cc",
        version="v2",
        definition="/d",
        operation="reprocess by r",
        active=Slot.BLUE,
        standby=Slot.GREEN,
        epoch=1,
        from_version="v1",
        from_generation=0,
        generation=1,
        start="earliest",
        start_offsets={0: 0, 1: 0},
        end="standby",
    ),
    ConfirmPlan(
        app="cc",
        operation="confirm by r",
        epoch=2,
        keep=Slot.GREEN,
        rebuild=Slot.BLUE,
        generation=1,
        version="v2",
        definition="/d",
        drop_generation=0,
        drop_version="v1",
        discards_reprocess=False,
        keep_until_ms=9,
    ),
]


@pytest.mark.parametrize("plan", EVERY_PLAN, ids=lambda p: type(p).__name__)
def test_a_plan_crosses_xcom_as_plain_json_and_comes_back_the_same(plan):
    xcom = plan.to_xcom()
    assert json.loads(json.dumps(xcom)) == xcom  # no Baton class in XCom: the UI shows it, no allow-list needed
    assert type(plan).of(json.loads(json.dumps(xcom))) == plan
    assert type(plan).of(plan) is plan


def test_slots_and_positions_are_typed_on_the_taking_side():
    plan = HandoffPlan.of({"fence": {"0": "10", "1": 12}, "epoch": "3", "from_slot": "blue", "to": "green"})
    assert plan.fence == {0: 10, 1: 12} and plan.epoch == 3 and plan.to is Slot.GREEN


def test_a_missing_field_is_named_and_a_wrong_value_says_which_field():
    with pytest.raises(PlanError, match=r"HandoffPlan: missing epoch, to"):
        HandoffPlan.of({"fence": {"0": 1}, "from_slot": "blue"})
    with pytest.raises(PlanError, match=r"HandoffPlan.to = 'purple'"):
        HandoffPlan.of({"fence": {"0": 1}, "epoch": 1, "from_slot": "blue", "to": "purple"})
    with pytest.raises(PlanError, match=r"Cutover.fence: expected an object of partition -> offset"):
        Cutover.of({"epoch": 1, "active": "blue", "fence": [1, 2], "at_ms": 0})


@pytest.mark.parametrize("raw", [None, "", "{'epoch': 1}", 7])
def test_no_plan_at_all_says_the_step_before_may_have_failed(raw):
    with pytest.raises(PlanError, match="did that step succeed"):
        StateCheckPlan.of(raw)


def test_extra_keys_are_ignored_and_defaults_fill_what_an_older_run_did_not_write():
    plan = StateCheckPlan.of({"position": {"0": 1}, "active": "blue", "standby": "green", "added_later": 1})
    assert plan.ahead_s == 2.0


def test_a_rollback_takes_either_runs_plan_as_the_version_change_they_share():
    upgrade, reprocess = EVERY_PLAN[5], EVERY_PLAN[6]
    assert VersionChange.of(upgrade.to_xcom()).operation == ""
    assert VersionChange.of(reprocess.to_xcom()).operation == "reprocess by r"


@pytest.mark.parametrize("raw, expected", [(True, True), (False, False), ("false", False), ("True", True)])
def test_a_flag_rendered_as_text_is_read_as_what_it_says(raw, expected):
    xcom = {**EVERY_PLAN[7].to_xcom(), "discards_reprocess": raw}
    assert ConfirmPlan.of(xcom).discards_reprocess is expected


def test_a_field_an_earlier_baton_wrote_under_another_name_is_still_read():
    """A run fenced before an upgrade of Baton resumes after it: its XCom says "from"."""
    plan = HandoffPlan.of({"fence": {"0": 1}, "epoch": 2, "from": "blue", "to": "green"})
    assert plan.from_slot is Slot.BLUE and "from" not in plan.to_xcom()
