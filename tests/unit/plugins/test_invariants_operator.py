"""The reprocess's invariants step asks the new generation's slot (the standby) through the control
record, defers the wait for its answer to the triggerer, and judges the answer: holds, breaks (the run
fails with the violations), could not read (a retry), or no answer (a clear timeout). No Spark
application of its own."""

from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, TaskDeferred

from baton.apps import load_app
from baton.control_plane import ControlPlane
from baton.plans import ReprocessPlan
from baton.records import InvariantsCheck, Role, Slot, SlotState, StatusRecord
from baton_airflow.operators.reprocess import InvariantsOperator
from baton_airflow.triggers.status import InvariantsAnswerTrigger
from tests.support.fakes import MemoryControlStore

APP = load_app("click_counts")
PLAN = ReprocessPlan(
    app=APP.name,
    version="v2",
    definition="v2.yaml",
    operation="reprocess by r",
    active=Slot.BLUE,
    standby=Slot.GREEN,
    epoch=1,
    from_version="v1",
    from_generation=0,
    generation=1,
    start="earliest",
    start_offsets={0: 0},
)


class Control:
    """The control plane, and a standby that answers what it is asked after `polls` reads of its status."""

    bootstrap = "unused:1"

    def __init__(self, answer: dict | None, polls: int = 0):
        self._plane = ControlPlane(MemoryControlStore(), writer="test")
        self._plane.move_slot(APP.name, Slot.BLUE, SlotState.STARTING, version="v1")
        self.answer, self.polls, self.reads, self.asked = answer, polls, 0, []

    def plane(self):
        return self._plane

    def status(self, app, slot=None, last_n=5000):
        self.reads += 1
        asked = self._plane.current(app).invariants_asked
        if asked and asked not in self.asked:
            self.asked.append(asked)
        answer = InvariantsCheck(asked=asked, **self.answer) if self.answer is not None and asked else None
        return [
            StatusRecord(
                app=app,
                slot=Slot.GREEN,
                state=SlotState.RUNNING,
                role=Role.STANDBY,
                epoch_seen=1,
                generation=1,
                invariants=answer if self.reads > self.polls else None,
            )
        ]


class TaskInstance:
    try_number = 2

    def __init__(self):
        self.xcom = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


def operator(timeout_s=30.0):
    return InvariantsOperator(task_id="invariants", app=APP.name, plan=PLAN.to_xcom(), timeout_s=timeout_s, poll_s=0.5)


def run(monkeypatch, control, event=None):
    """The task's first part (ask, defer) and, resumed with `event` (the trigger met by default), its end."""
    op = operator()
    monkeypatch.setattr(InvariantsOperator, "hooks", lambda self: (control, SimpleNamespace()))
    context = {"run_id": "manual__1", "ti": TaskInstance()}
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    assert deferred.value.method_name == "execute_complete"
    event = event or {"status": "met", "message": "answered"}
    return op.execute_complete(context, event, **deferred.value.kwargs), context


def test_the_standby_is_asked_by_this_run_and_try_and_the_wait_is_the_triggerers(monkeypatch):
    control = Control(None)
    monkeypatch.setattr(InvariantsOperator, "hooks", lambda self: (control, SimpleNamespace()))
    with pytest.raises(TaskDeferred) as deferred:
        operator(timeout_s=120).execute({"run_id": "manual__1", "ti": TaskInstance()})
    trigger = deferred.value.trigger
    assert isinstance(trigger, InvariantsAnswerTrigger)
    assert (trigger.app, trigger.slot, trigger.asked, trigger.generation, trigger.timeout_s) == (
        APP.name,
        "green",
        "manual__1:2",
        1,
        120.0,
    )
    assert control.plane().current(APP.name).invariants_asked == "manual__1:2"
    assert control.reads == 0  # the task itself does not wait


def test_an_answer_that_holds_passes_the_gate_and_clears_the_request(monkeypatch):
    control = Control({"ok": True, "batch_id": 9, "rows": 100})
    result, _ = run(monkeypatch, control)
    assert control.asked == ["manual__1:2"]
    assert control.plane().current(APP.name).invariants_asked == ""  # answered: a later launch does not check again
    assert result["ok"] and result["rows"] == 100 and result["asked"] == "manual__1:2"


def test_violations_fail_the_run_with_what_they_are(monkeypatch):
    control = Control({"ok": False, "batch_id": 9, "rows": 100, "violations": 1, "examples": ("user 7: count 0",)})
    with pytest.raises(AirflowFailException, match=r"generation 1 breaks the app's invariants: 1 violation.*user 7"):
        run(monkeypatch, control)


def test_a_state_that_could_not_be_read_is_no_verdict_and_a_retry(monkeypatch):
    control = Control({"ok": False, "unchecked": True, "error": "Py4JJavaError: file moved"})
    with pytest.raises(AirflowException, match="could not read the state: Py4JJavaError") as raised:
        run(monkeypatch, control)
    assert not isinstance(raised.value, AirflowFailException)  # retried


def test_a_standby_that_does_not_answer_is_a_timeout_that_says_so_and_a_retry(monkeypatch):
    timeout = {"status": "timeout", "message": "click_counts/green invariant check: not met within 600s"}
    with pytest.raises(
        AirflowException,
        match=r"green \(generation 1\) did not answer the invariant check: .*"
        r"not met within 600s; is it running\?",
    ) as raised:
        run(monkeypatch, Control(None), event=timeout)
    assert not isinstance(raised.value, AirflowFailException)


def test_an_answer_no_longer_in_the_status_is_a_retry_not_a_pass(monkeypatch):
    with pytest.raises(AirflowException, match="no longer in click_counts/green's recent status"):
        run(monkeypatch, Control(None))
