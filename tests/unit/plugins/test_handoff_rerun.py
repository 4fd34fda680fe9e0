"""A re-run of a finished handoff's steps (cleared, as after a lost success report) recognises this
run's handoff and returns the same plan, as XCom must carry it: plain JSON, never a Baton class (an
XCom Airflow cannot serialise fails the task)."""

import json

from baton.control_plane import ControlPlane
from baton.handoff import cut_over, with_fence
from baton.plans import Cutover, HandoffPlan
from baton.records import Slot, SlotState
from baton_airflow.operators.handoff import CutoverOperator, FenceOperator
from tests.support.fakes import MemoryControlStore

FENCE = {0: 120, 1: 80}


class Control:
    bootstrap = "broker:9092"

    def __init__(self, plane):
        self._plane = plane

    def plane(self):
        return self._plane


def test_re_run_fence_and_cutover_return_the_plan_and_the_cutover_as_json(monkeypatch):
    plane = ControlPlane(MemoryControlStore(), writer="test")
    for slot in Slot:
        plane.move_slot("click_counts", slot, SlotState.STARTING, version="v1")
        plane.move_slot("click_counts", slot, SlotState.RUNNING)
    plane.update("click_counts", with_fence(FENCE, 1, by="manual__run1"))
    plane.update("click_counts", cut_over(Slot.GREEN, 1))
    monkeypatch.setattr(FenceOperator, "control", lambda self: Control(plane))
    monkeypatch.setattr(CutoverOperator, "control", lambda self: Control(plane))

    plan = FenceOperator(task_id="fence", app="click_counts").execute({"run_id": "manual__run1"})
    assert json.loads(json.dumps(plan)) == plan
    assert HandoffPlan.of(plan) == HandoffPlan(fence=FENCE, epoch=1, from_slot=Slot.BLUE, to=Slot.GREEN)

    cutover = CutoverOperator(task_id="cutover", app="click_counts", plan=plan).execute({"run_id": "manual__run1"})
    assert json.loads(json.dumps(cutover)) == cutover
    assert Cutover.of(cutover).active is Slot.GREEN and Cutover.of(cutover).epoch == 2
