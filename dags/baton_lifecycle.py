"""Start, stop or restart an app, or one of its slots, from the UI form or the REST API.

REST: POST /api/v2/dags/baton_lifecycle/dagRuns {"conf": {"app": "click_counts", "action": "start",
"slot": "both"}}. The form's schema is enforced by Airflow before a run is created: an unknown app, a
bad slot name or a wrong type is a 400 naming the parameter, and nothing starts.
"""

from datetime import datetime

from airflow.sdk import DAG, Param, task

from baton_airflow.operators.slots import EnsureSlotRunningOperator, StopSlotOperator
from baton_airflow.params import app_param

with DAG(
    dag_id="baton_lifecycle",
    description="Start / stop / restart an app or one slot",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=4,
    tags=["baton"],
    params={
        "app": app_param(),
        "action": Param("start", type="string", enum=["start", "stop", "restart"]),
        "slot": Param(
            "both",
            type="string",
            enum=["both", "blue", "green"],
            description="one slot, or both (blue is the active writer of a new app)",
        ),
    },
    render_template_as_native_obj=True,
):

    @task
    def slots_to_stop(params=None) -> list[str]:
        if params["action"] not in ("stop", "restart"):
            return []
        return ["blue", "green"] if params["slot"] == "both" else [params["slot"]]

    @task
    def slots_to_start(params=None) -> list[str]:
        if params["action"] not in ("start", "restart"):
            return []
        return ["blue", "green"] if params["slot"] == "both" else [params["slot"]]

    stop = StopSlotOperator.partial(task_id="stop", app="{{ params.app }}").expand(slot=slots_to_stop())
    # A stop that had nothing to do is skipped, which must not skip the start.
    start = EnsureSlotRunningOperator.partial(
        task_id="start", app="{{ params.app }}", trigger_rule="none_failed"
    ).expand(slot=slots_to_start())
    stop >> start
