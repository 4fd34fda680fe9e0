"""Hand the active role to the hot standby at an exact offset fence, without stopping the output.

REST: POST /api/v2/dags/baton_cutover/dagRuns {"conf": {"app": "click_counts"}}. Steps: fence (F a few
seconds ahead of the input) -> cutover: once the active stands at exactly F and the standby is live and
not past it, one write (by the triggerer, the moment it sees that): epoch + 1, the standby is active
(it reaches F, then emits from there), the fence lifted. A failed gate lifts the fence and leaves the
active as it was (abort) and fails the run with the reason; every step is safe to retry (baton.handoff).
Runs for different apps go side by side; one for an app that a handoff, upgrade or reprocess holds is
refused with the reason.
"""

from datetime import datetime

from airflow.sdk import DAG, Param

from baton_airflow.alerts import notify_failed_run
from baton_airflow.operators.handoff import AbortHandoffOperator, CutoverOperator, FenceOperator
from baton_airflow.params import app_param

with DAG(
    dag_id="baton_cutover",
    description="Hand the active role to the hot standby at an exact offset fence",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=8,  # other apps' cutovers run side by side; the fence refuses a second of one app
    tags=["baton"],
    on_failure_callback=notify_failed_run,  # a failed handoff is an alert (baton_airflow.alerts)
    params={
        "app": app_param(),
        "ahead_s": Param(
            2.0, type="number", minimum=0, maximum=60, description="fence this many seconds of input ahead of the end"
        ),
        "fence_timeout_s": Param(
            120, type="integer", minimum=5, maximum=3600, description="how long the slots may take to reach the fence"
        ),
        "correct": Param(
            False,
            type="boolean",
            description="the new active publishes its whole state as output on taking over: the "
            "way back after a reprocess (downstream gets the previous generation's values)",
        ),
    },
    render_template_as_native_obj=True,
):
    fence = FenceOperator(
        task_id="fence",
        app="{{ params.app }}",
        ahead_s="{{ params.ahead_s }}",
        hold_s="{{ 4 * (params.fence_timeout_s + 10) + 120 }}",
    )
    cutover = CutoverOperator(
        task_id="cutover",
        app="{{ params.app }}",
        plan=fence.output,
        correct="{{ params.correct }}",
        wait_timeout_s="{{ params.fence_timeout_s }}",
        ahead_s="{{ params.ahead_s }}",
    )
    abort = AbortHandoffOperator(task_id="abort", app="{{ params.app }}", plan=fence.output)
    fence >> cutover >> abort
