"""End a reprocess: keep the generation that is active now, make the other slot its hot standby again.

REST: POST /api/v2/dags/baton_reprocess_confirm/dagRuns {"conf": {"app": "click_counts"}}

After baton_reprocess the previous generation stays hot in the other slot: the way back
(baton_cutover with {"correct": true}). Confirming gives that up: the other slot is rebuilt on the
active's generation from a copy of its checkpoint and follows it. Run after the way back was taken,
the same DAG discards the reprocess instead (the active runs the previous generation; the new one
goes). Checkpoints no slot runs any more are archived for `retention_days`, then deleted.

    validate ─▶ rebuild_standby ─▶ warm_up ─▶ finish
    a failed step ─▶ abort (the app freed, the active untouched, the reason reported)
"""

from datetime import datetime

from airflow.sdk import DAG, Param

from baton_airflow.operators.generations import (
    AbortConfirmOperator,
    ConfirmRequestOperator,
    FinishConfirmOperator,
    RebuildStandbyOperator,
)
from baton_airflow.params import app_param
from baton_airflow.sensors.slot import LagWithinSensor

PLAN = "{{ ti.xcom_pull(task_ids='validate') }}"

with DAG(
    dag_id="baton_reprocess_confirm",
    description="Keep the active generation after a reprocess: rebuild the other slot on it, archive the rest",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=4,  # a second request is refused by the app's lock, with the reason (see baton_reprocess)
    tags=["baton"],
    params={
        "app": app_param(),
        "retention_days": Param(
            7,
            type="number",
            minimum=0,
            maximum=3650,
            description="archived checkpoints are kept this long (0: deleted now)",
        ),
        "max_lag_records": Param(
            50_000,
            type="integer",
            minimum=0,
            description="warm-up: the rebuilt standby at most this many records behind "
            "what the active has emitted (beyond its pace)",
        ),
        "max_lag_s": Param(10.0, type="number", minimum=0, description="warm-up: and this many seconds"),
        "warm_up_timeout_s": Param(900, type="integer", minimum=60, maximum=86_400),
    },
    render_template_as_native_obj=True,
):
    app = "{{ params.app }}"
    validate = ConfirmRequestOperator(task_id="validate", app=app, retention_days="{{ params.retention_days }}")
    rebuild = RebuildStandbyOperator(task_id="rebuild_standby", app=app, plan=PLAN)
    warm_up = LagWithinSensor(
        task_id="warm_up",
        app=app,
        restart=rebuild.output,
        max_lag="{{ params.max_lag_records }}",
        max_lag_s="{{ params.max_lag_s }}",
        wait_timeout_s="{{ params.warm_up_timeout_s }}",
    )
    finish = FinishConfirmOperator(task_id="finish", app=app, plan=PLAN)
    steps = [validate, rebuild, warm_up, finish]
    abort = AbortConfirmOperator(task_id="abort", app=app, plan=PLAN, steps=[t.task_id for t in steps])

    validate >> rebuild >> warm_up >> finish
    steps >> abort
