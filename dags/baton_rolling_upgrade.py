"""Move an app to a new version without stopping its output (the seed's rolling upgrade, minus the
outage): the hot standby goes first, its state is compared with the active's at an input position
both have passed (the output flows meanwhile), it takes over at an exact fence, and the old version
stays hot until the new one has settled.

REST: POST /api/v2/dags/baton_rolling_upgrade/dagRuns {"conf": {"app": "click_counts", "version": "v2"}}.

    preflight ─▶ upgrade_standby ─▶ (restore_check ‖ warm_up ‖ check_position ─▶ state_check) ─▶ fence
      ─▶ cutover (waits at the fence) ─▶ settle ─▶ upgrade_old_active ─▶ (restore_check_old ‖ warm_up_old)
    any gate up to the cutover fails ─▶ abort (fence lifted, the active untouched, the reason reported)
    settle fails ─▶ rollback (the role flips back to the old version, still hot, at a fence)
    however it ends ─▶ end (teardown: the app, held by this run since the preflight, is free again)

Runs for different apps go side by side; a second handoff of the same app is refused with the reason.

Versions live in include/apps/versions/<app>/<version>.yaml (baton.apps.version_path).
"""

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from baton_airflow.alerts import notify_failed_run
from baton_airflow.operators.handoff import CutoverOperator, FenceOperator
from baton_airflow.operators.upgrade import (
    AbortUpgradeOperator,
    EndUpgradeOperator,
    PreflightOperator,
    RollbackOperator,
    StateCheckPositionOperator,
    UpgradeSlotOperator,
)
from baton_airflow.params import app_param
from baton_airflow.sensors.slot import (
    LagWithinSensor,
    RestoreCheckSensor,
    SettleSensor,
    StatesAgreeSensor,
)

PLAN = "{{ ti.xcom_pull(task_ids='preflight') }}"

with DAG(
    dag_id="baton_rolling_upgrade",
    description="Upgrade an app's slots one by one: restore check, warm-up, state check, cutover at a "
    "fence, settle or roll back",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=8,  # other apps' upgrades run side by side; the app's hold refuses a second of one app
    tags=["baton"],
    on_failure_callback=notify_failed_run,  # a failed handoff is an alert (baton_airflow.alerts)
    params={
        "app": app_param(),
        "version": Param(
            "v2",
            type="string",
            pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
            description="the version to move to (include/apps/versions/<app>/<version>.yaml)",
        ),
        "policy": Param(
            "exact",
            type="string",
            enum=["exact", "compatible"],
            description="exact: the new version builds the same state; compatible: same schema "
            "and keys, values may differ",
        ),
        "max_lag_records": Param(
            50_000,
            type="integer",
            minimum=0,
            description="warm-up before the cutover: the upgraded standby is at most this "
            "many records behind what the active has emitted (beyond what the "
            "app's standby pace holds it back by); the old active's warm-up "
            "after it: the app's max_lag_records",
        ),
        "max_lag_s": Param(
            10.0, type="number", minimum=0, description="warm-up: ... and at most this many seconds of input behind"
        ),
        "ahead_s": Param(
            2.0,
            type="number",
            minimum=0,
            maximum=60,
            description="plan the state check position and the fence at least this many seconds of "
            "input ahead of the end (more when the active's batches span more)",
        ),
        "fence_timeout_s": Param(120, type="integer", minimum=5, maximum=3600),
        "settle_s": Param(
            30,
            type="integer",
            minimum=0,
            maximum=3600,
            description="the new active must keep the SLA this long, else roll back",
        ),
        "max_batch_ms": Param(
            0,
            type="integer",
            minimum=0,
            description="settle: slowest batch allowed (0: the app's batch_ms_budget, or the old "
            "active's recent batch time when that was longer)",
        ),
    },
    render_template_as_native_obj=True,
):
    app = "{{ params.app }}"
    preflight = PreflightOperator(
        task_id="preflight",
        app=app,
        version="{{ params.version }}",
        policy="{{ params.policy }}",
        execution_timeout=timedelta(minutes=15),
    )
    upgrade_standby = UpgradeSlotOperator(task_id="upgrade_standby", app=app, plan=PLAN, role="standby")
    restore_check = RestoreCheckSensor(
        task_id="restore_check", app=app, wait_timeout_s=300, upgrade=upgrade_standby.output
    )
    warm_up = LagWithinSensor(
        task_id="warm_up",
        app=app,
        restart=upgrade_standby.output,
        max_lag="{{ params.max_lag_records }}",
        max_lag_s="{{ params.max_lag_s }}",
        wait_timeout_s=900,
    )
    check_position = StateCheckPositionOperator(task_id="check_position", app=app, ahead_s="{{ params.ahead_s }}")
    state_check = StatesAgreeSensor(
        task_id="state_check", app=app, check=check_position.output, policy="{{ params.policy }}", wait_timeout_s=900
    )  # as long as the warm-up
    fence = FenceOperator(
        task_id="fence",
        app=app,
        ahead_s="{{ params.ahead_s }}",
        # past this the health DAG lifts the fence: the run died
        hold_s="{{ 4 * (params.fence_timeout_s + 10) + 3 * 190 + 120 }}",
    )
    cutover = CutoverOperator(
        task_id="cutover",
        app=app,
        plan=fence.output,
        wait_timeout_s="{{ params.fence_timeout_s }}",
        ahead_s="{{ params.ahead_s }}",
    )
    settle = SettleSensor(
        task_id="settle",
        app=app,
        cutover=cutover.output,
        settle_s="{{ params.settle_s }}",
        max_batch_ms="{{ params.max_batch_ms }}",
    )
    upgrade_old = UpgradeSlotOperator(task_id="upgrade_old_active", app=app, plan=PLAN, role="active")
    restore_check_old = RestoreCheckSensor(
        task_id="restore_check_old", app=app, wait_timeout_s=300, upgrade=upgrade_old.output
    )
    # The old active, now the standby on the new version, is warm again once it is within the app's
    # lag budget (max_lag_records): a healthy standby as the health DAG judges one. No cutover follows,
    # so the tighter bound the cutover's warm-up uses would only make the run wait (~10 s of catch-up).
    warm_up_old = LagWithinSensor(task_id="warm_up_old", app=app, restart=upgrade_old.output, wait_timeout_s=900)

    before_cutover = [preflight, upgrade_standby, restore_check, warm_up, check_position, state_check, fence, cutover]
    abort = AbortUpgradeOperator(task_id="abort", app=app, plan=PLAN, steps=[t.task_id for t in before_cutover])
    rollback = RollbackOperator(
        task_id="rollback",
        app=app,
        plan=PLAN,
        cutover=cutover.output,
        ahead_s="{{ params.ahead_s }}",
        fence_timeout_s="{{ params.fence_timeout_s }}",
    )

    # A restarted slot's restore check (a digest of what it restored), its warm-up (catching up the
    # input that arrived while it restarted) and the state check (both states at a position ahead of
    # the active, which the catching-up standby ends a batch at on its way) wait side by side: none
    # needs another. One after the other they added the restore digest (~8 s) and the state check
    # (~20 s: the paced standby reaching the position, then two digests) to the upgrade.
    preflight >> upgrade_standby >> [restore_check, warm_up, check_position]
    check_position >> state_check
    (
        [restore_check, warm_up, state_check]
        >> fence
        >> cutover
        >> settle
        >> upgrade_old
        >> [restore_check_old, warm_up_old]
    )
    before_cutover >> abort
    settle >> rollback
    # However the run ends (success, abort, rollback, a failed step), the app is freed at the end.
    end = EndUpgradeOperator(task_id="end", app=app)
    [restore_check_old, warm_up_old, abort, rollback] >> end.as_teardown()
