"""A fence the active passed is planned again. A re-run of a finished handoff's steps (cleared, as after a lost success report) recognises this
run's handoff and returns the same plan, as XCom must carry it: plain JSON, never a Baton class (an
XCom Airflow cannot serialise fails the task)."""

import json

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from airflow.sdk.execution_time.context import OutletEventAccessors

import baton_airflow.operators.handoff as handoff_ops
from baton.control_plane import ControlPlane
from baton.handoff import cut_over, with_fence
from baton.plans import Cutover, HandoffPlan
from baton.records import CommitMarker, Slot, SlotState
from baton_airflow.assets import HANDOFFS
from baton_airflow.operators.handoff import MAX_CUTOVER_FENCES, CutoverOperator, FenceOperator
from tests.support.fakes import MemoryControlStore, PlaneControl

FENCE = {0: 120, 1: 80}


def test_re_run_fence_and_cutover_return_the_plan_and_the_cutover_as_json(monkeypatch):
    plane = ControlPlane(MemoryControlStore(), writer="test")
    for slot in Slot:
        plane.move_slot("click_counts", slot, SlotState.STARTING, version="v1")
        plane.move_slot("click_counts", slot, SlotState.RUNNING)
    plane.update("click_counts", with_fence(FENCE, 1, by="manual__run1"))
    plane.update("click_counts", cut_over(Slot.GREEN, 1))
    monkeypatch.setattr(FenceOperator, "control", lambda self: PlaneControl(plane))
    monkeypatch.setattr(CutoverOperator, "control", lambda self: PlaneControl(plane))

    plan = FenceOperator(task_id="fence", app="click_counts").execute({"run_id": "manual__run1"})
    assert json.loads(json.dumps(plan)) == plan
    assert HandoffPlan.of(plan) == HandoffPlan(fence=FENCE, epoch=1, from_slot=Slot.BLUE, to=Slot.GREEN)

    events = OutletEventAccessors()
    op = CutoverOperator(task_id="cutover", app="click_counts", plan=plan)
    cutover = op.execute({"run_id": "manual__run1", "outlet_events": events})
    assert json.loads(json.dumps(cutover)) == cutover
    assert Cutover.of(cutover).active is Slot.GREEN and Cutover.of(cutover).epoch == 2
    # The app's output Asset gets the handoff's event, through the step's alias outlet.
    assert op.outlets == [HANDOFFS]
    [event] = events[HANDOFFS].asset_alias_events
    assert event.dest_asset_key.uri == "kafka://broker:9092/user_counts"
    assert event.extra == {
        "app": "click_counts",
        "kind": "cutover",
        "epoch": 2,
        "active": "green",
        "version": "v1",
        "generation": 0,
        "fence": {"0": 120, "1": 80},
        "corrected": False,
        "run_id": "manual__run1",
    }


class PassedControl(PlaneControl):
    """The control hook as the cutover's second look sees it: the active's last marker and a new plan."""

    def __init__(self, plane, emitted):
        super().__init__(plane)
        self.emitted = emitted

    def last_commit(self, app):
        return CommitMarker(app=app.name, generation=0, epoch=1, slot=Slot.BLUE, batch_id=9, emitted=self.emitted)


def running_with_fence(run="manual__run1"):
    plane = ControlPlane(MemoryControlStore(), writer="test")
    for slot in Slot:
        plane.move_slot("click_counts", slot, SlotState.STARTING, version="v1")
        plane.move_slot("click_counts", slot, SlotState.RUNNING)
    plane.update("click_counts", with_fence(FENCE, 1, by=run))
    return plane


def test_a_fence_the_active_passed_is_planned_again_farther_ahead_and_the_cutover_waits_there(monkeypatch):
    plane = running_with_fence()
    control = PassedControl(plane, emitted={0: 130, 1: 80})  # partition 0 went past the fence
    asked = []
    monkeypatch.setattr(CutoverOperator, "control", lambda self: control)
    monkeypatch.setattr(
        handoff_ops, "plan_ahead", lambda control, app, rec, ahead_s, fence: asked.append(ahead_s) or {0: 400, 1: 300}
    )
    op = CutoverOperator(task_id="cutover", app="click_counts", plan=plan_xcom(), ahead_s=2)
    passed = {"status": "failed", "message": "the active emitted past the fence before it saw it"}
    with pytest.raises(TaskDeferred) as deferred:
        op.execute_complete({"run_id": "manual__run1", "ti": Ti()}, passed)
    rec = plane.current("click_counts")
    assert (rec.fence, rec.handoff.fence, rec.epoch, rec.active) == ({0: 400, 1: 300}, {0: 400, 1: 300}, 1, Slot.BLUE)
    assert asked == [4.0]  # twice the form's ahead_s
    assert deferred.value.trigger.fence == {0: 400, 1: 300} and deferred.value.kwargs["attempt"] == 2
    # The last fence passed as well: the run fails with the gate's reason, the fence left for the abort.
    with pytest.raises(AirflowFailException, match="emitted past the fence"):
        op.execute_complete(
            {"run_id": "manual__run1", "ti": Ti()},
            passed,
            plan=deferred.value.kwargs["plan"],
            attempt=MAX_CUTOVER_FENCES,
        )
    # A retry of the task (after a timeout) waits at the fence this run planned last, not the first one.
    with pytest.raises(TaskDeferred) as retried:
        op.execute({"run_id": "manual__run1", "ti": Ti()})
    assert retried.value.trigger.fence == {0: 400, 1: 300}


@pytest.mark.parametrize(
    "emitted, run, why",
    [
        ({0: 120, 1: 80}, "manual__run1", "the active stands at the fence: the gate failed for another reason"),
        ({0: 130, 1: 80}, "manual__other", "the fence is another run's"),
    ],
)
def test_no_new_fence_unless_the_active_passed_this_run_s_fence(monkeypatch, emitted, run, why):
    plane = running_with_fence(run)
    monkeypatch.setattr(CutoverOperator, "control", lambda self: PassedControl(plane, emitted))
    op = CutoverOperator(task_id="cutover", app="click_counts", plan=plan_xcom())
    with pytest.raises(AirflowFailException, match="standby processed past"):
        op.execute_complete(
            {"run_id": "manual__run1", "ti": Ti()},
            {"status": "failed", "message": "the standby processed past the fence"},
        )
    assert plane.current("click_counts").fence == FENCE, why


def plan_xcom():
    return HandoffPlan(fence=FENCE, epoch=1, from_slot=Slot.BLUE, to=Slot.GREEN).to_xcom()


class Ti:
    def xcom_push(self, key, value):
        pass
