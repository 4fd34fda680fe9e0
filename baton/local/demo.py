"""What `make demo` shows once the platform is up."""

from __future__ import annotations

from typing import Callable

from baton.airflow_api import AirflowClient
from baton.local.platform import Platform


def run_demo(platform: Platform, should_stop: Callable[[], bool]) -> None:
    a = platform.airflow
    client = AirflowClient(a.url, "admin", a.password())
    dags = client.wait_for_dags(timeout_s=120)
    print("\nBaton's DAGs in Airflow:")
    for d in dags:
        print(f"  - {d['dag_id']}: {(d.get('description') or '').strip()}")
    print(f"\nAirflow UI: {a.url}  (login admin / {a.password()})")
