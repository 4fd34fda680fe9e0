"""Reprocess history after a bug, without stopping the live output (seed 003, "Recovering from Bugs").

REST (typically from a backfill job): POST /api/v2/dags/baton_reprocess/dagRuns
    {"conf": {"app": "click_counts", "version": "v2", "start": "earliest"}}
    start: "earliest" | "timestamp" (+ "start_timestamp_ms") | "offsets" (+ "start_offsets": {"0": 120, ...})
    end: "handover" (default) | "standby": stop once the new generation has caught up and passed its
         checks, hot in the standby slot, the previous generation still live (finish_staged says what next)

    validate ─▶ new_generation ─▶ caught_up ─▶ invariants ─▶ handover ─▶ fence ─▶ cutover
      (corrected output) ─▶ settle ─▶ finish
    end=standby: handover skips the rest; invariants ─▶ finish_staged
    a failed step before the cutover ─▶ abort (standby back on its generation, the active untouched)
    settle fails ─▶ rollback (the previous generation, still hot, takes over and publishes its state)

The new generation runs in the standby slot with fresh state (the old checkpoint is kept, archived),
replays from the start while the active serves live output, and follows the active once caught up.
At the cutover it publishes its whole state, so a compacted view of the output holds the corrected
value of every key. The previous generation stays hot in the other slot: the way back is baton_cutover
with {"correct": true}, until baton_reprocess_confirm gives it up (that slot rebuilt on the new
generation, the old checkpoints archived for a retention period).
"""

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from baton_airflow.alerts import notify_failed_run
from baton_airflow.operators.handoff import CutoverOperator, FenceOperator
from baton_airflow.operators.reprocess import (
    AbortReprocessOperator,
    FinishReprocessOperator,
    FinishStagedOperator,
    HandoverGateOperator,
    InvariantsOperator,
    NewGenerationOperator,
    ReprocessRequestOperator,
)
from baton_airflow.operators.upgrade import RollbackOperator
from baton_airflow.params import app_param
from baton_airflow.sensors.slot import LagWithinSensor, SettleSensor

PLAN = "{{ ti.xcom_pull(task_ids='validate') }}"

with DAG(
    dag_id="baton_reprocess",
    description="Replay history with a new version in a new generation, then hand over with corrected output",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    # Not 1: Airflow would queue a second request behind the first, silently. The app's lock
    # (ControlRecord.operation) refuses it at once, with the reason, instead.
    max_active_runs=4,
    tags=["baton"],
    on_failure_callback=notify_failed_run,  # a failed handoff is an alert (baton_airflow.alerts)
    params={
        "app": app_param(),
        "version": Param(
            "v2",
            type="string",
            pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
            description="the (fixed) version to replay with",
        ),
        "start": Param("earliest", type="string", enum=["earliest", "timestamp", "offsets"]),
        "start_timestamp_ms": Param(
            None, type=["null", "integer"], minimum=0, description="start 'timestamp': epoch milliseconds"
        ),
        "start_offsets": Param(
            None,
            type=["null", "object"],
            description="start 'offsets': {\"<partition>\": <offset>} for every partition",
        ),
        "end": Param(
            "handover",
            type="string",
            enum=["handover", "standby"],
            description="handover: cut over to the new generation with corrected output; standby: stop "
            "once it is caught up and checked, hot in the standby slot (hand over later "
            "with baton_cutover correct=true, or drop it with baton_reprocess_confirm)",
        ),
        "max_lag_records": Param(
            20_000,
            type="integer",
            minimum=0,
            description="caught up: at most this many records behind what the active has emitted "
            "(beyond what the app's standby pace holds it back by)",
        ),
        "catch_up_timeout_s": Param(3600, type="integer", minimum=60),
        "ahead_s": Param(2.0, type="number", minimum=0, maximum=60),
        "fence_timeout_s": Param(120, type="integer", minimum=5, maximum=3600),
        "settle_s": Param(30, type="integer", minimum=0, maximum=3600),
    },
    render_template_as_native_obj=True,
):
    app = "{{ params.app }}"
    validate = ReprocessRequestOperator(
        task_id="validate",
        app=app,
        version="{{ params.version }}",
        start="{{ params.start }}",
        start_timestamp_ms="{{ params.start_timestamp_ms }}",
        start_offsets="{{ params.start_offsets }}",
        end="{{ params.end }}",
    )
    new_generation = NewGenerationOperator(task_id="new_generation", app=app, plan=PLAN)
    caught_up = LagWithinSensor(
        task_id="caught_up",
        app=app,
        restart=new_generation.output,
        max_lag="{{ params.max_lag_records }}",
        wait_timeout_s="{{ params.catch_up_timeout_s }}",
    )
    invariants = InvariantsOperator(task_id="invariants", app=app, plan=PLAN, execution_timeout=timedelta(minutes=15))
    handover = HandoverGateOperator(task_id="handover", app=app, plan=PLAN)
    finish_staged = FinishStagedOperator(task_id="finish_staged", app=app, plan=PLAN)
    fence = FenceOperator(
        task_id="fence", app=app, ahead_s="{{ params.ahead_s }}", hold_s="{{ 4 * (params.fence_timeout_s + 10) + 120 }}"
    )
    cutover = CutoverOperator(
        task_id="cutover",
        app=app,
        plan=fence.output,
        correct=True,
        wait_timeout_s="{{ params.fence_timeout_s }}",
        ahead_s="{{ params.ahead_s }}",
    )
    settle = SettleSensor(
        task_id="settle", app=app, cutover=cutover.output, settle_s="{{ params.settle_s }}", correct=True
    )
    finish = FinishReprocessOperator(task_id="finish", app=app, plan=PLAN)

    before_cutover = [validate, new_generation, caught_up, invariants, handover, fence, cutover, finish_staged]
    abort = AbortReprocessOperator(task_id="abort", app=app, plan=PLAN, steps=[t.task_id for t in before_cutover])
    rollback = RollbackOperator(
        task_id="rollback",
        app=app,
        plan=PLAN,
        cutover=cutover.output,
        correct=True,
        ahead_s="{{ params.ahead_s }}",
        fence_timeout_s="{{ params.fence_timeout_s }}",
    )

    validate >> new_generation >> caught_up >> invariants >> handover >> fence >> cutover >> settle >> finish
    invariants >> finish_staged
    before_cutover >> abort
    settle >> rollback
