"""Every minute: the health of every registered app and slot (liveness, stuck query, lag, batch time,
state and disk budgets, dead letters); restarts a dead slot with backoff and marks a crash-looping one
FAILED with the reason (per-app limits: the `health` section of the app definition)."""

from datetime import datetime, timedelta

from airflow.sdk import DAG

from baton_airflow.operators.health import HealthCheckOperator

with DAG(
    dag_id="baton_health",
    description="Health of every Baton slot; restart dead ones, stop crash loops",
    schedule=timedelta(minutes=1),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,  # two runs acting on the same dead slot would restart it twice
    dagrun_timeout=timedelta(minutes=5),
    tags=["baton"],
):
    HealthCheckOperator(task_id="check", execution_timeout=timedelta(minutes=4))
