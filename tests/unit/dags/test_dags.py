"""The DAG files parse, and their forms refuse bad input before a run exists."""

import copy
from datetime import timedelta

import pytest
from airflow.sdk.exceptions import ParamValidationError

from baton.settings import REPO_ROOT


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO_ROOT / "dags"))


def test_every_dag_file_imports(dagbag):
    assert dagbag.import_errors == {}
    assert {
        "baton_topics",
        "baton_lifecycle",
        "baton_health",
        "baton_cutover",
        "baton_rolling_upgrade",
        "baton_reprocess",
        "baton_reprocess_confirm",
        "baton_watch",
    } <= set(dagbag.dag_ids)


def test_health_runs_every_minute_one_run_at_a_time(dagbag):
    dag = dagbag.dags["baton_health"]
    assert dag.max_active_runs == 1
    assert dag.schedule == timedelta(minutes=1)


def test_the_watch_runs_always_one_run_at_a_time_and_then_triggers_baton_health(dagbag):
    dag = dagbag.dags["baton_watch"]
    assert dag.max_active_runs == 1 and type(dag.timetable).__name__ == "ContinuousTimetable"
    check = dag.get_task("check")
    assert check.upstream_task_ids == {"watch"} and check.trigger_dag_id == "baton_health"
    assert dag.get_task("watch").retries >= 1  # apache/airflow#71580


def test_the_watch_skips_its_run_when_nothing_changed_and_returns_what_did():
    from airflow.sdk.exceptions import AirflowSkipException

    from baton_airflow.sensors.slot_changes import SlotChangeSensor

    sensor = SlotChangeSensor(task_id="watch")
    with pytest.raises(AirflowSkipException, match="no slot died"):
        sensor.execute_complete({}, {"status": "quiet", "changes": [], "message": "no slot died or came up in 3600 s"})
    died = {"app": "a", "slot": "blue", "kind": "died", "launch": "l1", "why": "its process is gone"}
    assert sensor.execute_complete({}, {"status": "met", "changes": [died]}) == [died]


@pytest.mark.parametrize(
    "conf, field",
    [
        ({"app": "no_such_app"}, "app"),
        ({"app": "click_counts", "slot": "purple"}, "slot"),
        ({"app": "click_counts", "action": 3}, "action"),
        ({"app": "click_counts", "action": "explode"}, "action"),
    ],
)
def test_lifecycle_form_rejects_bad_conf_naming_the_field(dagbag, conf, field):
    params = copy.deepcopy(dagbag.dags["baton_lifecycle"].params)
    with pytest.raises(ParamValidationError, match=f"param {field}"):
        params.update(conf)
        params.validate()


def test_lifecycle_form_accepts_a_good_conf(dagbag):
    params = copy.deepcopy(dagbag.dags["baton_lifecycle"].params)
    params.update({"app": "click_counts", "action": "restart", "slot": "green"})
    assert params.validate() == {"app": "click_counts", "action": "restart", "slot": "green"}


def test_cutover_aborts_only_after_a_failed_gate(dagbag):
    dag = dagbag.dags["baton_cutover"]
    assert dag.max_active_runs > 1  # other apps' cutovers run side by side
    assert dag.get_task("abort").trigger_rule == "one_failed"
    assert dag.get_task("abort").upstream_task_ids == {"fence", "cutover"}  # fence: its XCom, the plan
    assert dag.get_task("cutover").upstream_task_ids == {"fence"}


@pytest.mark.parametrize(
    "conf, field",
    [
        ({"app": "nope"}, "app"),
        ({"app": "click_counts", "ahead_s": -1}, "ahead_s"),
        ({"app": "click_counts", "fence_timeout_s": "soon"}, "fence_timeout_s"),
    ],
)
def test_cutover_form_rejects_bad_conf_naming_the_field(dagbag, conf, field):
    params = copy.deepcopy(dagbag.dags["baton_cutover"].params)
    with pytest.raises(ParamValidationError, match=f"param {field}"):
        params.update(conf)
        params.validate()


def test_rolling_upgrade_gates_come_before_the_cutover_and_fail_into_abort_or_rollback(dagbag):
    dag = dagbag.dags["baton_rolling_upgrade"]
    assert dag.max_active_runs > 1  # other apps' upgrades run side by side
    order = [
        "preflight",
        "upgrade_standby",
        {"restore_check", "warm_up", "check_position"},
        "fence",
        "cutover",
        "settle",
        "upgrade_old_active",
        {"restore_check_old", "warm_up_old"},
    ]
    steps = [step if isinstance(step, set) else {step} for step in order]
    for before, after in zip(steps, steps[1:]):
        for task in after:  # every step waits for every task of the step before it (state_check: below)
            assert before - {"check_position"} <= dag.get_task(task).upstream_task_ids, (before, task)
    # The restarted standby's checks wait side by side; the state check follows its position.
    for task in ("restore_check", "warm_up", "check_position"):
        assert dag.get_task(task).upstream_task_ids == {"upgrade_standby"}, task
    assert dag.get_task("state_check").upstream_task_ids == {"check_position"}
    assert dag.get_task("fence").upstream_task_ids == {"restore_check", "warm_up", "state_check"}
    abort, rollback = dag.get_task("abort"), dag.get_task("rollback")
    assert abort.trigger_rule == rollback.trigger_rule == "one_failed"
    assert abort.upstream_task_ids == set().union(*steps[:5], {"state_check"})  # every step up to the cutover
    assert rollback.upstream_task_ids == {"cutover", "settle"}  # cutover: its XCom; a failed cutover is skipped
    # The app's hold, taken at the preflight, is freed by a teardown after every way the run can end;
    # a teardown is not counted in the run's state, which stays its outcome.
    end = dag.get_task("end")
    assert end.is_teardown and not end.on_failure_fail_dagrun
    assert end.upstream_task_ids == {"restore_check_old", "warm_up_old", "abort", "rollback"}
    assert {t.task_id for t in dag.leaves} == {"end"}


@pytest.mark.parametrize(
    "conf, field",
    [
        ({"app": "click_counts", "version": "../x"}, "version"),
        ({"app": "click_counts", "policy": "roughly"}, "policy"),
        ({"app": "click_counts", "max_lag_s": -1}, "max_lag_s"),
        ({"app": "nope"}, "app"),
    ],
)
def test_rolling_upgrade_form_rejects_bad_conf_naming_the_field(dagbag, conf, field):
    params = copy.deepcopy(dagbag.dags["baton_rolling_upgrade"].params)
    with pytest.raises(ParamValidationError, match=f"param {field}"):
        params.update(conf)
        params.validate()


def test_reprocess_gates_come_before_the_corrected_output_cutover(dagbag):
    dag = dagbag.dags["baton_reprocess"]
    assert dag.max_active_runs > 1  # a second request runs, and is refused by the app's lock with a reason
    order = [
        "validate",
        "new_generation",
        "caught_up",
        "invariants",
        "handover",
        "fence",
        "cutover",
        "settle",
        "finish",
    ]
    for before, after in zip(order, order[1:]):
        assert before in dag.get_task(after).upstream_task_ids, (before, after)
    assert dag.get_task("cutover").correct is True and dag.get_task("rollback").correct is True
    # end=standby: the handover gate skips the fence and everything after it; the run ends in finish_staged
    assert dag.get_task("finish_staged").upstream_task_ids == {"invariants"}
    assert dag.get_task("abort").upstream_task_ids == set(order[:7]) | {"finish_staged"}


@pytest.mark.parametrize(
    "conf, field",
    [
        ({"app": "click_counts", "start": "yesterday"}, "start"),
        ({"app": "click_counts", "start_timestamp_ms": "noon"}, "start_timestamp_ms"),
        ({"app": "click_counts", "start_offsets": [1, 2]}, "start_offsets"),
        ({"app": "click_counts", "version": ""}, "version"),
        ({"app": "click_counts", "end": "later"}, "end"),
    ],
)
def test_reprocess_form_rejects_bad_conf_naming_the_field(dagbag, conf, field):
    params = copy.deepcopy(dagbag.dags["baton_reprocess"].params)
    with pytest.raises(ParamValidationError, match=f"param {field}"):
        params.update(conf)
        params.validate()


def test_reprocess_confirm_rebuilds_then_warms_up_then_finishes_and_any_failure_aborts(dagbag):
    dag = dagbag.dags["baton_reprocess_confirm"]
    order = ["validate", "rebuild_standby", "warm_up", "finish"]
    for before, after in zip(order, order[1:]):
        assert before in dag.get_task(after).upstream_task_ids, (before, after)
    abort = dag.get_task("abort")
    assert abort.upstream_task_ids == set(order) and abort.trigger_rule == "one_failed"


@pytest.mark.parametrize(
    "conf, field",
    [
        ({"app": "click_counts", "retention_days": -1}, "retention_days"),
        ({"app": "click_counts", "max_lag_s": "soon"}, "max_lag_s"),
    ],
)
def test_reprocess_confirm_form_rejects_bad_conf_naming_the_field(dagbag, conf, field):
    params = copy.deepcopy(dagbag.dags["baton_reprocess_confirm"].params)
    with pytest.raises(ParamValidationError, match=f"param {field}"):
        params.update(conf)
        params.validate()


def test_every_jinja_argument_is_a_template_field(dagbag):
    """A "{{ ... }}" argument an operator does not template stays a literal string at run time (found
    the hard way: a sensor's timeout of "{{ params.x }}" failed at run time, in the e2e test)."""
    untemplated = [
        f"{dag_id}.{task.task_id}.{name}"
        for dag_id, dag in dagbag.dags.items()
        for task in dag.tasks
        for name, value in vars(task).items()
        if isinstance(value, str) and "{{" in value and name not in task.template_fields
    ]
    assert untemplated == []


def test_a_mapped_task_gets_the_retries_its_operator_gives_an_unmapped_one(dagbag):
    """The scheduler reads a mapped task's (`.partial().expand()`) retries and retry delay
    from its partial arguments, never from the operator's `__init__` body. A default set in the body
    left baton_lifecycle's start and stop without retries, and a start whose deferral Airflow lost
    (apache/airflow#71580: "finished with state success, but the task instance's state attribute is
    queued") failed the run with no reason. Each mapped task must get what the same operator gets
    unmapped."""
    import inspect

    from airflow.sdk import BaseOperator

    checked, wrong = [], []
    for dag_id, dag in dagbag.dags.items():
        for task in dag.tasks:
            if not hasattr(task, "partial_kwargs"):
                continue
            cls = task.operator_class
            own = cls.mro()[: cls.mro().index(BaseOperator)]  # the operator's classes, BaseOperator's args apart
            required = [
                n
                for c in own
                if "__init__" in vars(c)
                for n, p in inspect.signature(vars(c)["__init__"]).parameters.items()
                if p.kind is p.KEYWORD_ONLY and p.default is p.empty
            ]
            args = {n: task.partial_kwargs.get(n, "blue") for n in required}
            unmapped = cls(task_id=f"{task.task_id}_unmapped", **args)
            checked.append(f"{dag_id}.{task.task_id}")
            for field in ("retries", "retry_delay"):
                if task.partial_kwargs[field] != getattr(unmapped, field):
                    wrong.append(
                        f"{dag_id}.{task.task_id}.{field}: mapped {task.partial_kwargs[field]!r}, "
                        f"unmapped {getattr(unmapped, field)!r}"
                    )
    assert {"baton_lifecycle.start", "baton_lifecycle.stop"} <= set(checked)
    assert wrong == []
    assert dagbag.dags["baton_lifecycle"].get_task("start").partial_kwargs["retries"] >= 1  # apache/airflow#71580


def test_every_cutover_defers_to_the_trigger_that_writes_it_with_the_standby_allowed_to_trail(dagbag, monkeypatch):
    """The cutover task waits at the fence in the triggerer, which writes the cutover the moment the gate
    is met (no task start between the output stopping at F and the write); the standby may trail F by
    the app's lag budget, a corrected-output cutover included (the correction waits for F, not the gate)."""
    from airflow.sdk.exceptions import TaskDeferred

    from baton.apps import load_app
    from baton.control_plane import ControlPlane
    from baton.records import ControlRecord, Slot
    from tests.support.fakes import MemoryControlStore

    store = MemoryControlStore()
    store.append(ControlRecord(app="click_counts", revision=1, epoch=1, active=Slot.BLUE, fence={0: 10}))

    class Control:
        bootstrap = "broker:9092"

        def plane(self):
            return ControlPlane(store)

    plan = {"fence": {"0": 10}, "epoch": 1, "to": "green", "from_slot": "blue"}
    budget = load_app("click_counts").max_lag_records
    for dag_id, correct in (("baton_rolling_upgrade", False), ("baton_reprocess", True), ("baton_cutover", "true")):
        task = dagbag.dags[dag_id].get_task("cutover")
        monkeypatch.setattr(task, "control", lambda: Control())
        task.app, task.plan, task.correct, task.wait_timeout_s = "click_counts", plan, correct, 60
        with pytest.raises(TaskDeferred) as deferred:
            task.execute({})
        trigger = deferred.value.trigger
        assert type(trigger).__name__ == "CutoverTrigger"
        assert (trigger.slot, trigger.fence, trigger.epoch) == ("green", {0: 10}, 1)
        assert (trigger.trail_records, trigger.correct, trigger.timeout_s) == (budget, correct is not False, 60.0)
        assert deferred.value.method_name == "execute_complete"


def test_the_old_actives_warm_up_is_judged_by_the_apps_lag_budget(dagbag):
    """The warm-up before the cutover uses the form's tighter bound; the old active's, with no cutover
    after it, the app's max_lag_records (LagWithinSensor's default), as the health DAG judges a standby."""
    dag = dagbag.dags["baton_rolling_upgrade"]
    assert dag.get_task("warm_up").max_lag == "{{ params.max_lag_records }}"
    old = dag.get_task("warm_up_old")
    assert old.max_lag is None and old.max_lag_s is None
