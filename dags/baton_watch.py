"""Always on: the moment a slot dies (its process gone on this host, or its lease silent while its app's
other slot renews) or a restarted slot comes up, run baton_health, instead of waiting for its minute.

A failover itself needs no Airflow (the standby takes over by its lease); what waited for the minute was
the repair: the dead slot's restart as the standby, and, once it runs, its return to desired RUNNING (only
then may it take over by itself again). A run watches until something changes (deferred: it holds no
worker slot), triggers baton_health, and ends; the next run watches on. A run that saw nothing in an hour
is skipped."""

from datetime import datetime, timedelta

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG

from baton_airflow.sensors.slot_changes import SlotChangeSensor

with DAG(
    dag_id="baton_watch",
    description="Run baton_health the moment a Baton slot dies or comes back",
    schedule="@continuous",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # required by @continuous: one watch at a time
    tags=["baton"],
):
    watch = SlotChangeSensor(task_id="watch", wait_s=3600, execution_timeout=timedelta(minutes=70))
    # baton_health's own max_active_runs=1 queues this run behind a running one: never two checks at once.
    check = TriggerDagRunOperator(
        task_id="check",
        trigger_dag_id="baton_health",
        trigger_run_id="baton_watch__{{ run_id }}",
        wait_for_completion=False,
    )
    watch >> check
