"""The embedded platform: up -> status -> DAGs listed and runnable through the REST API -> down,
and nothing left running."""

import pytest

from baton.airflow_api import AirflowClient
from baton.local.broker import TANSU_NAME
from baton.local.platform import DEMO_LOADGEN, Platform
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
    # Baton's provider (the editable install's entry point): its connection types in the form's list.
    types = client.connection_types()
    assert (types.get("baton_kafka"), types.get("baton_spark")) == ("Baton Kafka", "Baton Spark")
    run = client.trigger("baton_topics", {})
    assert client.wait_for_run("baton_topics", run["dag_run_id"], timeout_s=180)["state"] == "success"
    client.close()

    platform.down(say=lambda *_: None)
    assert not any(pid_alive(p) for p in airflow_group | {broker_pid, airflow_pid})
    assert "broker:  stopped" in platform.status() and "airflow: stopped" in platform.status()


def test_demo_runs_the_main_job_until_ctrl_c_and_leaves_nothing_behind(tmp_path):
    """`make demo`'s command: the platform, then click_counts running on both slots with data flowing
    (its live table says so) and where to look; SIGINT (Ctrl-C) stops everything: Airflow, the broker,
    the slots and the load generator."""
    import json
    import os
    import re
    import signal
    import subprocess
    import sys
    import time

    import psutil

    env = {**os.environ, "BATON_HOME": str(tmp_path / "state"), "BATON_KAFKA_PORT": str(free_port()),
           "BATON_AIRFLOW_PORT": str(free_port())}
    env.pop("BATON_KAFKA_BOOTSTRAP", None)
    proc = subprocess.Popen([sys.executable, "-m", "baton.local", "demo"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    # A table row of a slot that reports running and reads input: app slot role desired reported version
    # gen epoch lag lag-s in/s ...
    flowing = re.compile(r"^click_counts\s+(blue|green)\s+\S+\s+running\s+running\s+v1\s+\d+\s+\d+\s+\S+\s+\S+\s+([\d,]+)")
    lines, seen = [], set()
    try:
        deadline = time.monotonic() + 420
        for line in proc.stdout:
            lines.append(line)
            if (m := flowing.match(line)) and int(m.group(2).replace(",", "")) > 0:
                seen.add(m.group(1))
            if seen == {"blue", "green"} or time.monotonic() > deadline:
                break
        out = "".join(lines)
        assert seen == {"blue", "green"}, out[-3000:]
        assert "baton_rolling_upgrade" in out and re.search(r"the Baton page: +http://127.0.0.1:\d+/plugin/baton", out)
        state = tmp_path / "state"
        recorded = {p.stem: int(p.read_text()) for p in state.glob("*.pid")}
        assert sorted(recorded) == sorted(["airflow", TANSU_NAME, DEMO_LOADGEN])  # `make down` finds each of them
        pids = [pid for name, pid in recorded.items() if name != DEMO_LOADGEN]
        slots = [json.loads(p.read_text())["pid"] for p in state.glob("slots/click_counts/*/driver.pid")]
        assert len(slots) == 2
        # Airflow's task processes come and go under the demo: one may exit between the listing and its cmdline.
        load = [c.pid for c in psutil.Process(proc.pid).children(recursive=True) if "baton.tools.loadgen" in cmdline(c)]
        assert load == [recorded[DEMO_LOADGEN]]
        groups = set().union(*(group_members(p) for p in pids + slots))
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
        rest = proc.communicate(timeout=180)[0]
        assert proc.returncode == 0, rest
        assert "load generator: stopped" in rest and "broker: stopped" in rest
        assert not any(pid_alive(p) for p in groups | set(pids) | set(slots) | set(load))
        assert list(state.glob("*.pid")) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run([sys.executable, "-m", "baton.local", "down"], env=env, capture_output=True)
        # The demo's load generator runs in a session of its own (the demo stops it on Ctrl-C): after a
        # failed assertion the demo was killed instead, so it is stopped here.
        for p in psutil.process_iter():
            if "baton.tools.loadgen" in cmdline(p) and f"127.0.0.1:{env['BATON_KAFKA_PORT']}" in cmdline(p):
                p.kill()


def cmdline(p) -> str:
    """A process's command line, or "" if it is gone or not ours to read."""
    import psutil

    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""
