"""The embedded platform through one life, as a user lives it: `make demo` until Ctrl-C, `make up` again
(triggers accepted at once; what a restart keeps and what it cannot), `make reset`, and a fresh start.
One test, so the platform starts three times rather than once per claim."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from baton.airflow_api import AirflowClient
from baton.local.broker import TANSU_NAME
from baton.local.platform import DEMO_LOADGEN, Platform
from baton.local.postgres import POSTGRES_NAME
from baton.local.procs import free_port, group_members, pid_alive
from baton.local.reset import reset
from baton.settings import Settings

pytestmark = pytest.mark.e2e

# A table row of a slot that reports running and reads input: app slot role desired reported version
# gen epoch lag lag-s in/s ...
FLOWING = re.compile(r"^click_counts\s+(blue|green)\s+\S+\s+running\s+running\s+v1\s+\d+\s+\d+\s+\S+\s+\S+\s+([\d,]+)")


def test_demo_then_up_again_then_reset(tmp_path, monkeypatch):
    """1. `make demo`: the platform, click_counts on both slots with data flowing, where to look; Ctrl-C
       stops everything (Airflow, PostgreSQL, the broker, the slots, the load generator).
    2. `make up` again returns once triggers are accepted: several sent at once right after it (the
       watcher and the health schedule running) all are, with no retry. The demo's run is still in
       Airflow's history (PostgreSQL kept it). The embedded broker kept no topic: the start on the
       demo's checkpoints fails with the input-data-loss reason, soon, never a hang.
    3. `baton reset` deletes the checkpoints and Airflow's database; the app then starts afresh, and
       `down` leaves nothing running."""
    state = tmp_path / "state"
    ports = {name: free_port() for name in ("BATON_KAFKA_PORT", "BATON_AIRFLOW_PORT", "BATON_POSTGRES_PORT")}
    # A user's environment: the repository's apps and DAGs and no test notifier (the e2e platform of the
    # other tests sets them in this process while it runs), this test's own state dir and ports.
    for name in (
        "BATON_APPS_DIR",
        "AIRFLOW_VAR_BATON_ALERT_NOTIFIERS",
        "BATON_KAFKA_BOOTSTRAP",
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BATON_HOME", str(state))
    env = {**os.environ, **{k: str(v) for k, v in ports.items()}}
    run_demo_until_ctrl_c(env, state)

    platform = Platform(
        Settings(
            state_dir=state,
            kafka_port=ports["BATON_KAFKA_PORT"],
            airflow_port=ports["BATON_AIRFLOW_PORT"],
            postgres_port=ports["BATON_POSTGRES_PORT"],
            kafka_bootstrap=f"127.0.0.1:{ports['BATON_KAFKA_PORT']}",
            spark_master="local[2]",
        )
    )
    try:
        platform.up(say=lambda *_: None)
        client = AirflowClient(platform.airflow.url, "admin", platform.airflow.password())
        wanted = [
            ("baton_lifecycle", {"app": "click_counts", "action": "start"}),
            ("baton_topics", {}),
            ("baton_health", {}),
            ("baton_topics", {}),
            ("baton_health", {}),
        ]
        began = time.monotonic()
        with ThreadPoolExecutor(len(wanted)) as pool:  # attempts=1: a 5xx fails the test instead of a retry
            runs = list(pool.map(lambda w: (w[0], client.trigger(w[0], w[1], attempts=1)), wanted))
        ended = {dag_id: client.wait_for_run(dag_id, run["dag_run_id"], timeout_s=600) for dag_id, run in runs[1:]}
        assert all(run["state"] == "success" for run in ended.values()), ended
        start = client.wait_for_run("baton_lifecycle", runs[0][1]["dag_run_id"], timeout_s=600)
        assert start["state"] == "failed" and time.monotonic() - began < 300
        reasons = client.failure_reasons("baton_lifecycle", start["dag_run_id"])
        assert reasons and all("input data loss on topic 'clicks'" in r for r in reasons), reasons
        history = client.request("GET", "/dags/baton_lifecycle/dagRuns", "runs", params={"limit": 10})["dag_runs"]
        assert {r["state"] for r in history} == {"success", "failed"}  # the demo's start, kept, and this one

        status = platform.status()
        assert f"bootstrap {platform.broker.bootstrap}, healthy=True" in status
        assert f"UI {platform.airflow.url}, healthy=True" in status
        assert f"login: admin / {platform.airflow.password()}" in status
        assert (
            f"postgres: running (pid {platform.postgres.proc.pid()}) on 127.0.0.1:{ports['BATON_POSTGRES_PORT']}"
            in status
        )
        assert platform.airflow.env()["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
        assert client.import_errors() == []
        # Baton's provider (the editable install's entry point): its connection types in the form's list.
        types = client.connection_types()
        assert (types.get("baton_kafka"), types.get("baton_spark")) == ("Baton Kafka", "Baton Spark")
        client.close()

        said: list[str] = []
        reset(platform, say=said.append)
        assert not (state / "slots").exists()
        assert (
            f"deleted {platform.postgres.home}: Airflow's metadata database: DAG runs, task history, "
            f"connections and variables" in said
        )
        platform.up(say=lambda *_: None)
        client = AirflowClient(platform.airflow.url, "admin", platform.airflow.password())
        run = client.trigger("baton_lifecycle", {"app": "click_counts", "action": "start"})
        fresh = client.wait_for_run("baton_lifecycle", run["dag_run_id"], timeout_s=600)
        assert fresh["state"] == "success", client.failure_reasons("baton_lifecycle", run["dag_run_id"])
        client.close()
        recorded = [int(p.read_text()) for p in state.glob("*.pid")]
        slots = [json.loads(p.read_text())["pid"] for p in state.glob("slots/*/*/driver.pid")]
        assert len(recorded) == 3 and len(slots) == 2
        groups = set().union(*(group_members(p) for p in recorded + slots))
    finally:
        platform.down(say=lambda *_: None)
    assert not any(pid_alive(p) for p in groups | set(recorded) | set(slots))
    status = platform.status()
    assert "broker:  stopped" in status and "airflow: stopped" in status and "postgres: stopped" in status


def run_demo_until_ctrl_c(env: dict[str, str], state) -> None:
    """`make demo`'s command until both slots show input flowing in its live table; then SIGINT (a
    terminal's Ctrl-C) and everything it started must be gone."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "baton.local", "demo"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines, seen = [], set()
    try:
        deadline = time.monotonic() + 420
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if (m := FLOWING.match(line)) and int(m.group(2).replace(",", "")) > 0:
                seen.add(m.group(1))
            if seen == {"blue", "green"} or time.monotonic() > deadline:
                break
        out = "".join(lines)
        assert seen == {"blue", "green"}, out[-3000:]
        assert "baton_rolling_upgrade" in out and re.search(r"the Baton page: +http://127.0.0.1:\d+/plugin/baton", out)
        recorded = {p.stem: int(p.read_text()) for p in state.glob("*.pid")}
        # `make down` finds each of them
        assert sorted(recorded) == sorted(["airflow", TANSU_NAME, POSTGRES_NAME, DEMO_LOADGEN])
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
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""
