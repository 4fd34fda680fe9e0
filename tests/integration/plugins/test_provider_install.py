"""Baton installs as an Airflow provider: its wheel, built from this checkout, installed with its
`airflow` extra into a fresh venv holding only Airflow 3 (core and task SDK, at the lock's versions),
is found by Airflow's providers manager through the `apache_airflow_provider` entry point. Its
connection types (baton_kafka, baton_spark) are in the list the API serves for the connection
form, every operator, sensor, hook and trigger module it declares imports there, and so do the metrics
and the slots' runtime (the extra brings PySpark, Arrow, msgspec, prometheus-client); the Baton page (an
AirflowPlugin) is loaded from the package's entry point with nothing in the plugins folder; state and
app definitions default to $AIRFLOW_HOME/baton, not site-packages."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
UV = Path(sys.executable).with_name("uv")

PROBE = """
import importlib, json
from airflow import plugins_manager
from airflow.providers_manager import ProvidersManager
from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService
info = ProvidersManager().providers.get("baton")
modules = [m for section in ("operators", "sensors", "hooks", "triggers")
           for group in (info.data.get(section, []) if info else []) for m in group["python-modules"]]
for m in modules:
    importlib.import_module(m)
# What the Baton page's metrics and the slots the tasks launch import (the extra must bring them).
for m in ("baton.metrics", "spark_apps.runtime.source.decode", "spark_apps.runtime.run", "pyspark.sql"):
    importlib.import_module(m)
from baton.apps import apps_dir
from baton.settings import Settings
print(json.dumps({"version": info.version if info else None,
                  "types": {t.connection_type: t.hook_name for t in HookMetaService.hook_meta_data()},
                  "kafka_fields": sorted(next(t.extra_fields or {} for t in HookMetaService.hook_meta_data()
                                              if t.connection_type == "baton_kafka")),
                  "modules": modules, "from": importlib.import_module("baton_airflow").__file__,
                  "plugins": {p["name"]: {"apps": [a["url_prefix"] for a in p.get("fastapi_apps") or []],
                                          "views": [v["href"] for v in p.get("external_views") or []]}
                              for p in plugins_manager.get_plugin_info()},
                  "plugin_errors": plugins_manager.get_import_errors(),
                  "state_dir": str(Settings.load().state_dir), "apps_dir": str(apps_dir())}))
"""


def run(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


def test_the_wheel_in_a_fresh_airflow_venv_is_a_provider_with_its_connection_types(tmp_path):
    # Built from a copy: setuptools leaves build/ and *.egg-info beside the sources it builds.
    source = tmp_path / "source"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", ".state", "__pycache__", "build", "*.egg-info", "bench", "tests", "docs", "jvm"
        ),
    )
    run(str(UV), "build", "-q", "--wheel", "-o", str(tmp_path / "dist"), str(source))
    wheel = next((tmp_path / "dist").glob("baton-*.whl"))
    venv = tmp_path / "venv"
    run(str(UV), "venv", "-q", "--python", sys.executable, str(venv))
    run(
        str(UV),
        "pip",
        "install",
        "-q",
        "--python",
        str(venv / "bin" / "python"),
        "-c",
        str(REPO / "requirements.txt"),
        "apache-airflow-core",
        "apache-airflow-task-sdk",
        f"{wheel}[airflow]",
    )
    home = tmp_path / "airflow"
    home.mkdir()
    # Nothing of this checkout on the path: what the venv holds is all the probe sees.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "AIRFLOW_HOME": str(home)}
    out = run(str(venv / "bin" / "python"), "-c", PROBE, env=env, cwd=tmp_path).stdout
    found = json.loads(out.strip().splitlines()[-1])
    assert found["version"] == "0.1.0"
    assert found["types"]["baton_kafka"] == "Baton Kafka" and found["types"]["baton_spark"] == "Baton Spark"
    # The connection form's own fields: TLS and SASL beside login and password (baton_airflow.hooks.kafka)
    assert {"security_protocol", "sasl_mechanism", "ssl_ca_location", "ssl_key_password"} <= {
        f.rsplit("__", 1)[-1] for f in found["kafka_fields"]
    }, found["kafka_fields"]
    assert "baton_airflow.operators.upgrade" in found["modules"] and "baton_airflow.triggers.status" in found["modules"]
    assert found["from"].startswith(str(venv)), found["from"]
    # The Baton page: its app under /baton and its navigation entry, from the wheel alone.
    assert found["plugins"].get("baton") == {"apps": ["/baton"], "views": ["baton/"]}, found["plugins"]
    assert found["plugin_errors"] == {}, found["plugin_errors"]
    # The deployment's state and app definitions beside its Airflow, never under site-packages.
    assert (found["state_dir"], found["apps_dir"]) == (str(home / "baton" / "state"), str(home / "baton" / "apps"))
