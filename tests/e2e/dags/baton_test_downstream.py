"""A user's downstream DAG, for the e2e tests (a second DAG bundle of the e2e platform: tests/e2e/conftest.py):
scheduled on the cc_cut app's output Asset, it runs after each cutover of that app and returns what the
event that triggered it said."""

import json
import os
from datetime import datetime

from airflow.sdk import DAG, task

from baton.apps import load_registry
from baton_airflow.assets import output_asset

BOOTSTRAP = os.environ.get("BATON_KAFKA_BOOTSTRAP", "127.0.0.1:29092")
APPS = [app for name, app in sorted(load_registry().items()) if name.startswith("cc_cut")]

if APPS:  # only on the e2e platform, whose registry has the app
    OUTPUT = output_asset(BOOTSTRAP, APPS[0].output.topic)
    with DAG(
        dag_id="baton_test_downstream",
        schedule=[OUTPUT],
        start_date=datetime(2026, 1, 1),
        catchup=False,
        tags=["baton-test"],
    ):

        @task
        def seen(triggering_asset_events=None) -> str:
            """The extra of each event of the app's output that triggered this run, as JSON."""
            return json.dumps([dict(event.extra) for event in (triggering_asset_events or {})[OUTPUT]])

        seen()
