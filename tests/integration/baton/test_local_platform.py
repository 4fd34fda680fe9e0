"""The embedded platform: up -> status -> DAGs listed and runnable through the REST API -> down,
and nothing left running."""

import pytest

from baton.airflow_api import AirflowClient
from baton.local.platform import Platform
from baton.local.procs import free_port, group_members, pid_alive
from baton.settings import Settings

pytestmark = pytest.mark.e2e


@pytest.fixture
def platform(tmp_path):
    kafka_port = free_port()
    p = Platform(Settings(state_dir=tmp_path / "state", kafka_port=kafka_port, airflow_port=free_port(),
                          kafka_bootstrap=f"127.0.0.1:{kafka_port}", spark_master="local[2]"))
    yield p
    p.down(say=lambda *_: None)


def test_up_status_dags_down(platform):
    platform.up(say=lambda *_: None)
    broker_pid, airflow_pid = platform.broker.proc.pid(), platform.airflow.proc.pid()
    airflow_group = group_members(airflow_pid)
    assert len(airflow_group) >= 5  # standalone + scheduler, dag-processor, api-server, triggerer

    status = platform.status()
    assert f"bootstrap {platform.broker.bootstrap}, healthy=True" in status
    assert f"UI {platform.airflow.url}, healthy=True" in status
    assert f"login: admin / {platform.airflow.password()}" in status

    client = AirflowClient(platform.airflow.url, "admin", platform.airflow.password())
    dag_ids = [d["dag_id"] for d in client.wait_for_dags()]
    assert "baton_topics" in dag_ids
    assert client.import_errors() == []
    run = client.trigger("baton_topics", {})
    assert client.wait_for_run("baton_topics", run["dag_run_id"], timeout_s=180)["state"] == "success"
    client.close()

    platform.down(say=lambda *_: None)
    assert not any(pid_alive(p) for p in airflow_group | {broker_pid, airflow_pid})
    assert "broker:  stopped" in platform.status() and "airflow: stopped" in platform.status()


def test_demo_runs_until_ctrl_c_and_leaves_nothing_behind(tmp_path):
    """`make demo`'s command: it reaches a running platform listing Baton's DAGs, and SIGINT
    (Ctrl-C) shuts everything down."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "BATON_HOME": str(tmp_path / "state"), "BATON_KAFKA_PORT": str(free_port()),
           "BATON_AIRFLOW_PORT": str(free_port())}
    env.pop("BATON_KAFKA_BOOTSTRAP", None)
    proc = subprocess.Popen([sys.executable, "-m", "baton.local", "demo"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    try:
        deadline = time.monotonic() + 300
        for line in proc.stdout:
            lines.append(line)
            if "Press Ctrl-C" in line or time.monotonic() > deadline:
                break
        out = "".join(lines)
        assert "Press Ctrl-C" in out, out
        assert "baton_topics" in out and "Airflow UI: http://127.0.0.1:" in out
        pids = [int(p.read_text()) for p in (tmp_path / "state").glob("*.pid")]
        assert len(pids) == 2
        groups = set().union(*(group_members(p) for p in pids))
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
        rest = proc.communicate(timeout=120)[0]
        assert proc.returncode == 0, rest
        assert not any(pid_alive(p) for p in groups | set(pids))
        assert list((tmp_path / "state").glob("*.pid")) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run([sys.executable, "-m", "baton.local", "down"], env=env, capture_output=True)
