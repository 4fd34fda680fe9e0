"""Baton's topics: validate app definitions and (re)create the control, status and app topics.

Run it after the broker was restarted (the embedded broker keeps data in memory) or after adding an
app definition under include/apps/.
"""

from datetime import datetime

from airflow.sdk import DAG

from baton_airflow.operators.topics import EnsureTopicsOperator

with DAG(
    dag_id="baton_topics",
    description="Validate app definitions and create any missing Baton topic",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["baton"],
):
    EnsureTopicsOperator(task_id="ensure_topics")
