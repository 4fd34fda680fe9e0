"""A rollback converges: a fence the new active passed is planned again further ahead; a new active that
reaches no fence (or is gone) is stopped and the old slot takes over by a failover; an old slot that is
not running is the one case it cannot, and the run says what to do."""

from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException

from baton.apps import load_app
from baton.conditions import Check
from baton.control_plane import ControlPlane
from baton.handoff import cut_over, with_fence
from baton.plans import UpgradePlan
from baton.records import CommitMarker, Role, Slot, SlotState, StatusRecord
from baton_airflow.operators import upgrade
from baton_airflow.operators.upgrade import MAX_ROLLBACK_FENCES, RollbackOperator
from tests.support.fakes import MemoryControlStore

APP = load_app("click_counts")
EMITTED = {p: 1_000 for p in range(APP.input.partitions)}
PLAN = UpgradePlan(
    app=APP.name,
    version="v2",
    definition="v2.yaml",
    active=Slot.BLUE,
    standby=Slot.GREEN,
    epoch=1,
    from_version="v1",
    policy="exact",
)


class Control:
    def __init__(self):
        self._plane = ControlPlane(MemoryControlStore(), writer="test")

    def plane(self):
        return self._plane

    def last_commit(self, app):
        return CommitMarker(app=app.name, generation=0, epoch=2, slot=Slot.GREEN, batch_id=9, emitted=dict(EMITTED))

    def status(self, app, slot=None, last_n=5000):
        return [
            StatusRecord(
                app=app,
                slot=Slot.BLUE,
                state=SlotState.RUNNING,
                role=Role.STANDBY,
                epoch_seen=2,
                batch_id=8,
                processed=dict(EMITTED),
                ts_ms=1,
            )
        ]


class Spark:
    def __init__(self, running=(Slot.BLUE, Slot.GREEN)):
        self.running, self.stopped = set(running), []

    def find(self, app, slot):
        return SimpleNamespace(pid=1) if slot in self.running else None

    def stop(self, app, slot, grace_s=0):
        self.stopped.append(slot)
        self.running.discard(slot)


@pytest.fixture
def control():
    """green took over from blue at epoch 2 (the cutover being rolled back); both slots run."""
    c = Control()
    plane = c.plane()
    for slot in Slot:
        plane.move_slot(APP.name, slot, SlotState.STARTING, version="v1")
        plane.move_slot(APP.name, slot, SlotState.RUNNING)
    plane.update(APP.name, with_fence(EMITTED, 1, by="upgrade"))
    plane.update(APP.name, cut_over(Slot.GREEN, 1))
    return c


def rollback(monkeypatch, control, spark, gates):
    fences = []

    def set_fence(control, app, rec, ahead_s, hold_s=600.0, by=""):
        fences.append(ahead_s)
        fence = {p: 2_000 * len(fences) for p in range(app.input.partitions)}
        return control.plane().update(app.name, with_fence(fence, rec.epoch, 0, by))

    def wait_at_fence(self, control, plane, app, standby, fence, epoch):
        gate = gates.pop(0)
        if gate.met:
            plane.update(app.name, cut_over(standby, epoch))
        return gate

    monkeypatch.setattr(upgrade, "set_fence", set_fence)
    monkeypatch.setattr(RollbackOperator, "wait_at_fence", wait_at_fence)
    op = RollbackOperator(
        task_id="rollback",
        app=APP.name,
        plan=PLAN.to_xcom(),
        cutover={"active": "green", "epoch": 2, "fence": EMITTED, "at_ms": 1},
    )
    return op.roll_back(control, spark, APP, PLAN, Slot.GREEN, 2, "run/rollback", "settle failed"), fences


def test_a_passed_fence_is_planned_again_twice_as_far_ahead(monkeypatch, control):
    passed = Check(failed=True, message="the active emitted past the fence before it saw it")
    how, fences = rollback(monkeypatch, control, Spark(), [passed, passed, Check(met=True)])
    assert how == "at a fence" and fences == [2.0, 4.0, 8.0]
    rec = control.plane().current(APP.name)
    assert (rec.active, rec.epoch, rec.fence) == (Slot.BLUE, 3, None)


def test_a_new_active_that_reaches_no_fence_is_stopped_and_the_old_slot_takes_over(monkeypatch, control):
    spark = Spark()
    timeouts = [Check(message="not reached within 120 s")] * MAX_ROLLBACK_FENCES
    how, fences = rollback(monkeypatch, control, spark, timeouts)
    assert "failover" in how and len(fences) == MAX_ROLLBACK_FENCES and spark.stopped == [Slot.GREEN]
    rec = control.plane().current(APP.name)
    assert (rec.active, rec.epoch, rec.fence) == (Slot.BLUE, 3, None)


def test_a_gone_new_active_is_failed_over_from_at_once(monkeypatch, control):
    how, fences = rollback(monkeypatch, control, Spark(running=[Slot.BLUE]), [])
    assert "failover" in how and fences == []
    assert control.plane().current(APP.name).active is Slot.BLUE


def test_an_old_slot_that_is_not_running_cannot_take_the_role_back_and_the_run_says_what_to_do(monkeypatch, control):
    with pytest.raises(AirflowFailException) as failed:
        rollback(monkeypatch, control, Spark(running=[Slot.GREEN]), [])
    assert "old slot blue" in str(failed.value) and "baton_cutover" in str(failed.value)
    assert control.plane().current(APP.name).active is Slot.GREEN  # nothing moved
