"""baton_cutover's run state is its outcome: the abort step (the DAG's leaf) fails the run with the
failed step's reason whenever the handoff did not happen, lifting only its own fence, and succeeds only
when this run's cutover did happen (a step failed after the write)."""

import pytest
from airflow.sdk.exceptions import AirflowFailException

from baton.control_plane import ControlPlane
from baton.handoff import cut_over, with_fence
from baton.plans import HandoffPlan
from baton.records import Slot, SlotState
from baton_airflow.operators.handoff import AbortHandoffOperator, FenceOperator
from tests.support.fakes import MemoryControlStore, PlaneControl

FENCE = {0: 120, 1: 80}
RUN = "manual__run1"


class Ti:
    """XCom between the run's tasks: what each task pushed, by task id."""

    def __init__(self, task_id, xcoms):
        self.task_id, self.xcoms = task_id, xcoms

    def xcom_push(self, key, value):
        self.xcoms[(self.task_id, key)] = value

    def xcom_pull(self, task_ids, key):
        return self.xcoms.get((task_ids, key))


def context(task_id, xcoms):
    return {"run_id": RUN, "ti": Ti(task_id, xcoms)}


def running(plane):
    for slot in Slot:
        plane.move_slot("click_counts", slot, SlotState.STARTING, version="v1")
        plane.move_slot("click_counts", slot, SlotState.RUNNING)


@pytest.fixture
def plane(monkeypatch):
    plane = ControlPlane(MemoryControlStore(), writer="test")
    monkeypatch.setattr(FenceOperator, "control", lambda self: PlaneControl(plane))
    monkeypatch.setattr(AbortHandoffOperator, "control", lambda self: PlaneControl(plane))
    return plane


def plan():
    return HandoffPlan(fence=FENCE, epoch=1, from_slot=Slot.BLUE, to=Slot.GREEN).to_xcom()


def test_a_fence_refused_for_an_app_never_started_fails_the_run_with_that_reason(plane):
    xcoms = {}
    with pytest.raises(AirflowFailException, match="never been started"):
        FenceOperator(task_id="fence", app="click_counts").execute(context("fence", xcoms))
    with pytest.raises(AirflowFailException) as failed:
        AbortHandoffOperator(task_id="abort", app="click_counts", plan=None).execute(context("abort", xcoms))
    assert str(failed.value) == (
        "click_counts: handoff did not happen: click_counts has never been started: nothing to hand over; "
        "nothing changed"
    )


def test_a_fence_refused_for_a_stopped_standby_fails_the_run_and_the_active_stays(plane):
    running(plane)
    plane.move_slot("click_counts", Slot.GREEN, SlotState.STOPPED)
    xcoms = {}
    with pytest.raises(AirflowFailException):
        FenceOperator(task_id="fence", app="click_counts").execute(context("fence", xcoms))
    with pytest.raises(AirflowFailException) as failed:
        AbortHandoffOperator(task_id="abort", app="click_counts", plan=None).execute(context("abort", xcoms))
    assert "click_counts/green is stopped: a handoff needs both slots RUNNING" in str(failed.value)
    assert str(failed.value).endswith("blue stays active at epoch 1")


def test_a_failed_gate_lifts_this_run_s_fence_and_fails_the_run(plane):
    running(plane)
    plane.update("click_counts", with_fence(FENCE, 1, by=RUN))
    xcoms = {("cutover", "reason"): "the standby went past the fence"}
    with pytest.raises(AirflowFailException) as failed:
        AbortHandoffOperator(task_id="abort", app="click_counts", plan=plan()).execute(context("abort", xcoms))
    assert "handoff did not happen: the standby went past the fence; blue stays active" in str(failed.value)
    rec = plane.current("click_counts")
    assert rec.fence is None and rec.epoch == 1 and rec.active is Slot.BLUE


def test_another_handoff_s_fence_is_left_set_and_the_run_still_fails(plane):
    running(plane)
    plane.update("click_counts", with_fence(FENCE, 1, by="manual__another"))
    with pytest.raises(AirflowFailException, match="a step failed without a reason"):
        AbortHandoffOperator(task_id="abort", app="click_counts", plan=plan()).execute(context("abort", {}))
    assert plane.current("click_counts").fence == FENCE


def test_a_cutover_this_run_completed_is_a_handoff_that_happened(plane):
    running(plane)
    plane.update("click_counts", with_fence(FENCE, 1, by=RUN))
    plane.update("click_counts", cut_over(Slot.GREEN, 1))
    AbortHandoffOperator(task_id="abort", app="click_counts", plan=plan()).execute(context("abort", {}))
    rec = plane.current("click_counts")
    assert rec.active is Slot.GREEN and rec.epoch == 2
