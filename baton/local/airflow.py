"""Airflow 3 standalone for the embedded platform: this repo's dags/ and plugins/, examples off,
parallelism 4, loopback only, one admin user whose password is kept at <state>/airflow/passwords.json,
its metadata in the platform's PostgreSQL (baton.local.postgres) when given one.

Standalone is stopped with SIGINT: on SIGTERM it exits without stopping its children.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from baton.local.procs import Managed
from baton.procfs import process_stats, tree_threads
from baton.settings import REPO_ROOT

ADMIN_USER = "admin"
DAGS_FOLDER = REPO_ROOT / "dags"
# The nice value of the dag-processor and the parsers it forks. It parses every DAG file again every
# 30 s (Airflow's min_file_process_interval; the forms' lists of apps come from the registry when a
# file is parsed, so a new app shows within that): measured here, 1.6 CPU-seconds in 2-3 s, most of a
# core, every 30 s, which on a 2-core host delays the active slot's batches by as much. Parsing can
# wait; the scheduler, triggerer and tasks, which carry the handoffs, keep the default priority.
PARSING_NICE = 10


@dataclass(frozen=True)
class Airflow:
    state_dir: Path
    port: int
    kafka_bootstrap: str
    host: str = "127.0.0.1"
    # SQLAlchemy URI of the metadata database; empty: Airflow's default, SQLite under its home.
    database_uri: str = ""

    @property
    def home(self) -> Path:
        return self.state_dir / "airflow"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def password_file(self) -> Path:
        return self.home / "passwords.json"

    @property
    def proc(self) -> Managed:
        return Managed("airflow", self.state_dir)

    def password(self) -> str:
        return json.loads(self.password_file.read_text())[ADMIN_USER]

    def env(self) -> dict[str, str]:
        """The environment every Airflow process of the platform runs with."""
        secret_file = self.home / "jwt_secret"
        venv_bin = str(Path(sys.executable).parent)
        env = {
            **os.environ,
            "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN_USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.password_file),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API__HOST": self.host,
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API_AUTH__JWT_SECRET": secret_file.read_text().strip() if secret_file.exists() else "",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "True",
            # A task's supervisor can miss its process's exit when the log sockets close first, and then
            # notices it only at its next wake-up, `min_heartbeat_interval` (5 s) later. Meanwhile the
            # scheduler will not re-queue a deferred task whose trigger fired, and when it does in the
            # same loop as the late "success" event, it fails the task (apache/airflow#71580). 1 s
            # narrows both; it costs one heartbeat a second per running task.
            "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
            "BATON_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            # Tasks launch slots under the platform's state dir (identity records, logs, checkpoints).
            "BATON_HOME": str(self.state_dir),
            # Baton's Kafka connection (type baton_kafka: the bootstrap as its host), read by the hooks.
            "AIRFLOW_CONN_BATON_KAFKA": json.dumps({"conn_type": "baton_kafka", "host": self.kafka_bootstrap}),
            # This checkout's packages first, the provider's too (plugins/), whatever else the
            # environment's installs point at.
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), str(REPO_ROOT / "plugins"), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        if self.database_uri:
            env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = self.database_uri
        return env

    def prepare(self) -> None:
        """Write the admin password and JWT secret once; later `up`s keep them."""
        self.home.mkdir(parents=True, exist_ok=True)
        if not self.password_file.exists():
            self.password_file.write_text(json.dumps({ADMIN_USER: secrets.token_urlsafe(12)}))
            self.password_file.chmod(0o600)
        secret_file = self.home / "jwt_secret"
        if not secret_file.exists():
            secret_file.write_text(secrets.token_urlsafe(32))
            secret_file.chmod(0o600)

    def start(self, timeout_s: float = 240.0) -> None:
        """Start standalone and return once a DAG trigger will be accepted: every component healthy,
        every DAG of dags/ parsed, and a write through the REST API done (see wait_accepting)."""
        deadline = time.monotonic() + timeout_s
        self.prepare()
        airflow_bin = str(Path(sys.executable).parent / "airflow")
        self.proc.start([airflow_bin, "standalone"], env=self.env(), cwd=self.home)
        self.proc.wait_healthy(self.healthy, timeout_s, f"Airflow standalone on {self.url}")
        self.lower_parsing_priority()
        self.proc.wait_healthy(
            self.accepting,
            max(deadline - time.monotonic(), 30.0),
            f"Airflow on {self.url}: DAGs of {DAGS_FOLDER} parsed and the API writable",
        )

    def expected_dags(self) -> set[str]:
        """The DAG ids of the platform's dags/ folder: one DAG a file, named as the file."""
        return {p.stem for p in DAGS_FOLDER.glob("*.py") if not p.name.startswith("_")}

    def accepting(self) -> bool:
        """A trigger now would be accepted: every expected DAG is listed by the API (parsed and
        serialized), and a write through the API succeeded (one DAG's paused flag set to what it is:
        a real write to the metadata database that changes nothing). Failures mean "not yet": the
        caller's timeout names the log."""
        from baton.airflow_api import AirflowClient

        try:
            client = AirflowClient(self.url, ADMIN_USER, self.password(), timeout_s=10)
            try:
                listed = {d["dag_id"]: d for d in client.dags()}
                if self.expected_dags() - set(listed):
                    return False
                probe = listed[min(self.expected_dags())]
                client.request(
                    "PATCH", f"/dags/{probe['dag_id']}", "write probe", json={"is_paused": bool(probe["is_paused"])}
                )
                return True
            finally:
                client.close()
        except Exception:
            return False

    def lower_parsing_priority(self) -> list[int]:
        """Set the dag-processor's threads (and any parser it runs now; later ones inherit it) to
        PARSING_NICE; the processes changed. Best effort: a dag-processor not found changes nothing."""
        standalone = self.proc.pid()
        if standalone is None:
            return []
        changed = []
        for pid, fields in process_stats():
            if int(fields[1]) != standalone or "dag-processor" not in _argv(pid):
                continue
            for tid in tree_threads(pid):
                try:
                    os.setpriority(os.PRIO_PROCESS, tid, max(PARSING_NICE, os.getpriority(os.PRIO_PROCESS, tid)))
                except OSError:  # a thread gone meanwhile
                    continue
            changed.append(pid)
        return changed

    def health(self) -> dict:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=5) as resp:
                return json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError):
            return {}

    def healthy(self, attempts: int = 1, every_s: float = 1.0) -> bool:
        """Every component reports healthy; `attempts` probes, `every_s` apart, before saying no (a
        status report should not call a platform down for one slow answer of a busy API server)."""
        parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
        for i in range(attempts):
            h = self.health()
            if h and all(h.get(p, {}).get("status") == "healthy" for p in parts):
                return True
            if i + 1 < attempts:
                time.sleep(every_s)
        return False

    def running(self) -> bool:
        return self.proc.pid() is not None

    def stop(self, timeout_s: float = 60.0) -> bool:
        return self.proc.stop(sig=signal.SIGINT, timeout_s=timeout_s, leader_only=True)


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []
