"""The embedded platform: up -> triggers accepted at once -> status -> down, and nothing left running; what a
restart keeps and what it cannot; the demo."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from baton.airflow_api import AirflowClient
from baton.local.broker import TANSU_NAME
from baton.local.platform import DEMO_LOADGEN, Platform
from baton.local.postgres import POSTGRES_NAME
from baton.local.procs import free_port, group_members, pid_alive
from baton.settings import Settings

pytestmark = pytest.mark.e2e


@pytest.fixture
def platform(tmp_path):
    kafka_port = free_port()
    p = Platform(
        Settings(
            state_dir=tmp_path / "state",
            kafka_port=kafka_port,
            airflow_port=free_port(),
            kafka_bootstrap=f"127.0.0.1:{kafka_port}",
            spark_master="local[2]",
        )
    )
    yield p
    p.down(say=lambda *_: None)


def test_up_status_dags_down(platform):
    """`up` returns once triggers are accepted: several sent at once right after it (the watcher and the
    health schedule running) all are, with no retry. Airflow's metadata is in the platform's PostgreSQL."""
    platform.up(say=lambda *_: None)
    broker_pid, airflow_pid = platform.broker.proc.pid(), platform.airflow.proc.pid()
    postgres_pid = platform.postgres.proc.pid()
    airflow_group = group_members(airflow_pid)
    assert len(airflow_group) >= 5  # standalone + scheduler, dag-processor, api-server, triggerer

    client = AirflowClient(platform.airflow.url, "admin", platform.airflow.password())
    wanted = [
        ("baton_topics", {}),
        ("baton_health", {}),
        ("baton_topics", {}),
        ("baton_health", {}),
        ("baton_lifecycle", {"app": "click_counts", "action": "stop"}),
    ]
    with ThreadPoolExecutor(len(wanted)) as pool:  # attempts=1: a 5xx fails the test instead of a retry
        runs = list(pool.map(lambda w: (w[0], client.trigger(w[0], w[1], attempts=1)), wanted))
    for dag_id, run in runs:
        assert client.wait_for_run(dag_id, run["dag_run_id"], timeout_s=240)["state"] == "success", (dag_id, run)

    status = platform.status()
    assert f"bootstrap {platform.broker.bootstrap}, healthy=True" in status
    assert f"UI {platform.airflow.url}, healthy=True" in status
    assert f"login: admin / {platform.airflow.password()}" in status
    assert f"postgres: running (pid {postgres_pid}) on 127.0.0.1:{platform.postgres.bound_port()}" in status
    assert platform.airflow.env()["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
    assert client.import_errors() == []
    # Baton's provider (the editable install's entry point): its connection types in the form's list.
    types = client.connection_types()
    assert (types.get("baton_kafka"), types.get("baton_spark")) == ("Baton Kafka", "Baton Spark")
    client.close()

    platform.down(say=lambda *_: None)
    assert not any(pid_alive(p) for p in airflow_group | {broker_pid, airflow_pid, postgres_pid})
    status = platform.status()
    assert "broker:  stopped" in status and "airflow: stopped" in status and "postgres: stopped" in status


def test_a_restart_keeps_airflow_history_a_lost_input_fails_with_its_reason_and_reset_starts_over(platform):
    """Airflow's runs survive `down` / `up` (PostgreSQL keeps them). The embedded broker does not keep its
    topics: a slot started again on its checkpoint fails with the input-data-loss reason, soon, never a
    hang; `baton reset` deletes the checkpoints and Airflow's database, and the app then starts afresh."""
    from baton.local.reset import reset

    platform.up(say=lambda *_: None)
    client = AirflowClient(platform.airflow.url, "admin", platform.airflow.password())
    first = start(client)
    assert first["state"] == "success", client.failure_reasons("baton_lifecycle", first["dag_run_id"])
    client.close()
    platform.down(say=lambda *_: None)

    platform.up(say=lambda *_: None)
    client = AirflowClient(platform.airflow.url, "admin", platform.airflow.password())
    assert client.dag_run("baton_lifecycle", first["dag_run_id"])["state"] == "success"  # history kept
    began = time.monotonic()
    again = start(client)
    assert again["state"] == "failed" and time.monotonic() - began < 300
    reasons = client.failure_reasons("baton_lifecycle", again["dag_run_id"])
    assert reasons and all("input data loss on topic 'clicks'" in r for r in reasons), reasons
    client.close()

    said: list[str] = []
    reset(platform, say=said.append)
    assert not (platform.settings.state_dir / "slots").exists()
    assert (
        f"deleted {platform.postgres.home}: Airflow's metadata database: DAG runs, task history, "
        f"connections and variables" in said
    )
    platform.up(say=lambda *_: None)
    client = AirflowClient(platform.airflow.url, "admin", platform.airflow.password())
    fresh = start(client)
    assert fresh["state"] == "success", client.failure_reasons("baton_lifecycle", fresh["dag_run_id"])
    client.close()


def start(client: AirflowClient) -> dict:
    run = client.trigger("baton_lifecycle", {"app": "click_counts", "action": "start"})
    return client.wait_for_run("baton_lifecycle", run["dag_run_id"], timeout_s=600)


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

    env = {
        **os.environ,
        "BATON_HOME": str(tmp_path / "state"),
        "BATON_KAFKA_PORT": str(free_port()),
        "BATON_AIRFLOW_PORT": str(free_port()),
        "BATON_POSTGRES_PORT": str(free_port()),
    }
    env.pop("BATON_KAFKA_BOOTSTRAP", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "baton.local", "demo"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    # A table row of a slot that reports running and reads input: app slot role desired reported version
    # gen epoch lag lag-s in/s ...
    flowing = re.compile(
        r"^click_counts\s+(blue|green)\s+\S+\s+running\s+running\s+v1\s+\d+\s+\d+\s+\S+\s+\S+\s+([\d,]+)"
    )
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
        assert sorted(recorded) == sorted(
            ["airflow", TANSU_NAME, POSTGRES_NAME, DEMO_LOADGEN]
        )  # `make down` finds each of them
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
        assert "load generator: stopped" in rest and "broker: stopped" in rest and "postgres: stopped" in rest
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
