"""The reprocess's invariants step asks the new generation's slot (the standby) through the control
record and judges its answer: holds, breaks (the run fails with the violations), could not read (a
retry), or no answer (a clear timeout). No Spark application of its own."""

from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from baton.apps import load_app
from baton.control_plane import ControlPlane
from baton.plans import ReprocessPlan
from baton.records import InvariantsCheck, Role, Slot, SlotState, StatusRecord
from baton_airflow.operators.reprocess import InvariantsOperator
from tests.support.fakes import MemoryControlStore

APP = load_app("click_counts")
PLAN = ReprocessPlan(app=APP.name, version="v2", definition="v2.yaml", operation="reprocess by r", active=Slot.BLUE,
                     standby=Slot.GREEN, epoch=1, from_version="v1", from_generation=0, generation=1,
                     start="earliest", start_offsets={0: 0})


class Control:
    """The control plane, and a standby that answers what it is asked after `polls` reads of its status."""

    def __init__(self, answer: dict | None, polls: int = 2):
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
        return [StatusRecord(app=app, slot=Slot.GREEN, state=SlotState.RUNNING, role=Role.STANDBY, epoch_seen=1,
                             generation=1, invariants=answer if self.reads > self.polls else None)]


class TaskInstance:
    try_number = 2

    def __init__(self):
        self.xcom = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


def run(monkeypatch, control, timeout_s=30.0):
    op = InvariantsOperator(task_id="invariants", app=APP.name, plan=PLAN.to_xcom(), timeout_s=timeout_s, poll_s=0.01)
    monkeypatch.setattr(InvariantsOperator, "hooks", lambda self: (control, SimpleNamespace()))
    context = {"run_id": "manual__1", "ti": TaskInstance()}
    return op.execute(context), context


def test_the_standby_is_asked_by_this_run_and_try_and_its_answer_passes_the_gate(monkeypatch):
    control = Control({"ok": True, "batch_id": 9, "rows": 100})
    result, _ = run(monkeypatch, control)
    assert control.asked == ["manual__1:2"]
    assert control.plane().current(APP.name).invariants_asked == ""  # answered: a later launch does not check again
    assert result["ok"] and result["rows"] == 100 and control.reads == 3


def test_violations_fail_the_run_with_what_they_are(monkeypatch):
    control = Control({"ok": False, "batch_id": 9, "rows": 100, "violations": 1, "examples": ("user 7: count 0",)})
    with pytest.raises(AirflowFailException, match=r"generation 1 breaks the app's invariants: 1 violation.*user 7"):
        run(monkeypatch, control)


def test_a_state_that_could_not_be_read_is_no_verdict_and_a_retry(monkeypatch):
    control = Control({"ok": False, "unchecked": True, "error": "Py4JJavaError: file moved"})
    with pytest.raises(AirflowException, match="could not read the state: Py4JJavaError") as raised:
        run(monkeypatch, control)
    assert not isinstance(raised.value, AirflowFailException)  # retried


def test_a_standby_that_does_not_answer_is_a_timeout_that_says_so(monkeypatch):
    with pytest.raises(AirflowException, match=r"green \(generation 1\) did not answer the invariant check within 0.2 s"):
        run(monkeypatch, Control(None), timeout_s=0.2)
