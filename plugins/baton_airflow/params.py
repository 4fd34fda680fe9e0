"""Form fields shared by Baton's DAGs."""

from __future__ import annotations

from airflow.sdk import Param

from baton.apps import load_registry


def app_param() -> Param:
    """The registered app to act on: an enum of the registry, so the form (and the REST API) refuses
    an unknown name before a run exists. A bad definition fails the DAG file's import, naming the file
    and the field: nothing can be started from a broken registry."""
    apps = sorted(load_registry())
    return Param(apps[0] if apps else "", type="string", enum=apps or [""], description="registered app")
