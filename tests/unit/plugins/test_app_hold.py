"""One handoff of an app at a time, any number of apps at once: a rolling upgrade holds its app from
the preflight to its teardown (ControlRecord.operation), a second upgrade or a cutover of that app is
refused with the reason, the upgrade's own fence is not, and the teardown frees only its own hold."""

from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException

from baton.control_plane import ControlPlane
from baton.plans import UpgradePlan
from baton.records import Slot, SlotState
from baton_airflow.operators import handoff as handoff_ops
from baton_airflow.operators.handoff import FenceOperator
from baton_airflow.operators.upgrade import EndUpgradeOperator, PreflightOperator, upgrade_operation
from tests.support.fakes import MemoryControlStore, PlaneControl

APP, OTHER = "click_counts", "click_windows"


class Spark:
    def find(self, app, slot):
        return SimpleNamespace(pid=1)


class Ti:
    def __init__(self):
        self.pushed = {}

    def xcom_push(self, key, value):
        self.pushed[key] = value


def context(run_id):
    return {"run_id": run_id, "ti": Ti()}


@pytest.fixture
def plane(monkeypatch):
    plane = ControlPlane(MemoryControlStore(), writer="test")
    for app in (APP, OTHER):
        for slot in Slot:
            plane.move_slot(app, slot, SlotState.STARTING, version="v1")
            plane.move_slot(app, slot, SlotState.RUNNING)
    for op in (PreflightOperator, EndUpgradeOperator):
        monkeypatch.setattr(op, "hooks", lambda self: (PlaneControl(plane), Spark()))
    monkeypatch.setattr(FenceOperator, "control", lambda self: PlaneControl(plane))
    # The fence's position comes from the slots' status and the input's end: not what is tested here.
    monkeypatch.setattr(handoff_ops, "plan_ahead", lambda control, app, rec, ahead_s, fence: {0: 10, 1: 10})
    return plane


def preflight(run_id):
    return PreflightOperator(task_id="preflight", app=APP, version="v2").execute(context(run_id))


def test_an_upgrade_holds_its_app_and_a_second_one_is_refused_with_the_reason(plane):
    plan = UpgradePlan.of(preflight("manual__up1"))
    assert plan.operation == upgrade_operation("manual__up1")
    assert plane.current(APP).operation == "rolling upgrade by manual__up1"
    assert UpgradePlan.of(preflight("manual__up1")).operation == plan.operation  # a retry of the same run
    with pytest.raises(AirflowFailException, match="rolling upgrade by manual__up1 is under way: one at a time"):
        preflight("manual__up2")


def test_another_app_s_handoff_goes_on_beside_it(plane):
    preflight("manual__up1")
    FenceOperator(task_id="fence", app=OTHER).execute(context("manual__cut1"))
    assert plane.current(OTHER).fence == {0: 10, 1: 10}


def test_a_cutover_of_a_held_app_is_refused_and_the_upgrade_s_own_fence_is_not(plane):
    preflight("manual__up1")
    with pytest.raises(AirflowFailException, match="rolling upgrade by manual__up1 is under way: one handoff"):
        FenceOperator(task_id="fence", app=APP).execute(context("manual__cut1"))
    assert plane.current(APP).fence is None
    FenceOperator(task_id="fence", app=APP).execute(context("manual__up1"))
    assert plane.current(APP).fence == {0: 10, 1: 10}


def test_the_teardown_frees_only_its_own_hold_and_the_next_upgrade_may_start(plane):
    preflight("manual__up1")
    EndUpgradeOperator(task_id="end", app=APP).execute(context("manual__up2"))
    assert plane.current(APP).operation == "rolling upgrade by manual__up1"
    EndUpgradeOperator(task_id="end", app=APP).execute(context("manual__up1"))
    assert plane.current(APP).operation == ""
    preflight("manual__up2")
    assert plane.current(APP).operation == "rolling upgrade by manual__up2"


def test_a_hold_past_its_time_is_a_dead_run_s_and_frees_the_app(plane, monkeypatch):
    preflight("manual__up1")
    held_until = plane.current(APP).operation_expires_ms
    monkeypatch.setattr(plane, "now_ms", lambda: held_until + 1)
    FenceOperator(task_id="fence", app=APP).execute(context("manual__cut1"))
    assert plane.current(APP).fence is not None
