"""One platform (broker, Airflow standalone, Spark slots in local mode) for every e2e test of the session:
starting it costs about a minute. Each test uses its own app from APPS (its own topics and slots).

BATON_TEST_KAFKA_BOOTSTRAP: the platform uses that Kafka cluster instead of starting the embedded
broker (as `make up` does with BATON_KAFKA_BOOTSTRAP). The apps' names then get a suffix unique to
the run, so a cluster that ran the suite before holds nothing of theirs (the control topic keeps
every app's record), and their topics are deleted at the end."""

import json
import os
import re
import time
import uuid
from pathlib import Path

import pytest

from baton.airflow_api import AirflowClient
from baton.apps import load_registry
from baton.kafka.admin import delete_topics
from baton.local.platform import Platform
from baton.local.procs import free_port
from baton.settings import Settings
from tests.support.e2e import ALERTS

APPS = {
    # A cold slot's first batches on a busy 2-core machine take seconds: a budget they meet.
    "cc_e2e": "module: spark_apps.apps.click_counts\ntrigger_ms: 500\nmax_records_per_trigger: 5000\n"
    "batch_ms_budget: 15000\n",
    "cc_cut": "module: spark_apps.apps.click_counts\ntrigger_ms: 500\nmax_records_per_trigger: 5000\n",
    "cc_resume": "module: spark_apps.apps.click_counts\ntrigger_ms: 500\nmax_records_per_trigger: 5000\n",
    # click_counts with the test fault tests.support.late_position (test_rolling_upgrade.py writes it).
    "cc_up": "module: tests.support.late_position_app\ntrigger_ms: 500\nmax_records_per_trigger: 5000\n"
    "batch_ms_budget: 15000\n",
    "cc_fix": "module: tests.support.buggy_counts\ntrigger_ms: 500\nmax_records_per_trigger: 5000\n"
    "batch_ms_budget: 15000\n",
    "cc_lost": "module: spark_apps.apps.click_counts\ntrigger_ms: 500\nmax_records_per_trigger: 5000\n",
    # Never started: the handoffs that cannot happen (test_lifecycle_and_health.py).
    "cc_idle": "module: spark_apps.apps.click_counts\n",
    # A budget no batch meets: its slots are always DEGRADED, as on a busy host; a restarted one must
    # still be desired RUNNING again (test_failover.py), or it could never take over by itself.
    "cc_fail": "module: spark_apps.apps.click_counts\ntrigger_ms: 500\nmax_records_per_trigger: 5000\n"
    "batch_ms_budget: 1\n",
    "crashy": "module: tests.support.crashing_app\n"
    # Restart at once, then after 1 s; the third death in the window gives up.
    "health: {max_restarts: 2, restart_backoff_s: 1, restart_window_s: 600, start_grace_s: 90}\n",
}
# With a spare driver, as an app is by default: the app whose driver a test kills with Airflow stopped
# (test_lifecycle_and_health.py). The others need not pay for a spare's start on a shared CI host.
SPARES = {"cc_e2e"}
# Other versions of an app (include/apps/versions/<app>/<version>.yaml in a deployment): the module each runs.
VERSIONS = {
    "cc_up": {
        "v2": "spark_apps.apps.click_counts_v2",  # same state as v1: an exact upgrade
        "v3": "spark_apps.apps.click_counts_v3",  # another state schema: refused at preflight
        "v4": "tests.support.late_position_app",
    },  # v1's code again: the rollback test's target
    "cc_fix": {"v2": "spark_apps.apps.click_counts"},  # the fix of v1's injected bug (tests.support.buggy_counts)
}


BUNDLES_ENV = "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"
LOCAL_BUNDLE = "airflow.dag_processing.bundles.local.LocalDagBundle"
TEST_DAGS = Path(__file__).resolve().parent / "dags"


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    apps_dir = root / "apps"
    apps_dir.mkdir()
    external = os.environ.get("BATON_TEST_KAFKA_BOOTSTRAP", "").strip()
    suffix = f"_{uuid.uuid4().hex[:6]}" if external else ""
    for short, body in APPS.items():
        name = short + suffix
        # A spare driver only where a test kills drivers: the others need not pay for its start.
        spare = f"spare_driver: {'true' if short in SPARES else 'false'}\n"
        (apps_dir / f"{name}.yaml").write_text(
            f"name: {name}\nversion: v1\ninput: {{topic: in-{name}, partitions: 2}}\n"
            f"output: {{topic: out-{name}, partitions: 2}}\n{spare}{body}"
        )
        for version, module in VERSIONS.get(short, {}).items():
            (apps_dir / "versions" / name).mkdir(parents=True, exist_ok=True)
            v1 = (apps_dir / f"{name}.yaml").read_text().replace("version: v1", f"version: {version}")
            (apps_dir / "versions" / name / f"{version}.yaml").write_text(
                re.sub(r"^module: .*$", f"module: {module}", v1, flags=re.MULTILINE)
            )
    saved = {
        k: os.environ.get(k) for k in ("BATON_APPS_DIR", "BATON_HOME", "AIRFLOW_VAR_BATON_ALERT_NOTIFIERS", BUNDLES_ENV)
    }
    os.environ["BATON_APPS_DIR"] = str(apps_dir)
    os.environ["BATON_HOME"] = str(root / "state")
    # The deployment's alert notifier: one that records what it was sent (ALERTS in the state dir).
    # Beside dags/, a second DAG bundle: tests/e2e/dags, a user's DAG scheduled on an app's output Asset.
    os.environ[BUNDLES_ENV] = json.dumps(
        [
            {"name": "dags-folder", "classpath": LOCAL_BUNDLE, "kwargs": {}},
            {"name": "baton-tests", "classpath": LOCAL_BUNDLE, "kwargs": {"path": str(TEST_DAGS)}},
        ]
    )
    os.environ["AIRFLOW_VAR_BATON_ALERT_NOTIFIERS"] = json.dumps(
        [{"class": "tests.support.recording_notifier.RecordingNotifier", "kwargs": {"path": str(root / ALERTS)}}]
    )
    kafka_port = free_port()
    platform = Platform(
        Settings(
            state_dir=root / "state",
            kafka_port=kafka_port,
            airflow_port=free_port(),
            kafka_bootstrap=external or f"127.0.0.1:{kafka_port}",
            spark_master="local[2]",
            external_kafka=bool(external),
        )
    )
    try:
        platform.up(say=lambda *_: None)
        client = AirflowClient(platform.airflow.url, "admin", platform.airflow.password())
        ids = {d["dag_id"] for d in client.wait_for_dags()}
        deadline = time.monotonic() + 120
        while not {"baton_lifecycle", "baton_health", "baton_cutover"} <= ids and time.monotonic() < deadline:
            time.sleep(3)
            ids = {d["dag_id"] for d in client.dags()}
        assert client.import_errors() == []
        registry = load_registry()
        yield platform, client, {short: registry[short + suffix] for short in APPS}
        client.close()
    finally:
        platform.down(say=lambda *_: None)
        if external:  # the run's apps' own topics (the shared control, status and leases topics stay)
            delete_topics(external, [t.name for short in APPS for t in load_registry()[short + suffix].topics()])
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
