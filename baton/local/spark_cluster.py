"""A Spark standalone cluster on loopback: one master and one worker, started from the pyspark
wheel's own `bin/spark-class` (no separate Spark download), as managed processes under a state dir.

It is the embedded stand-in for the docker-compose Spark cluster: apps launched with
`--master spark://127.0.0.1:<port>` run their executors in the worker's JVMs, exactly as on a
real standalone cluster. Healthy means the master's web UI reports status ALIVE and lists at least
one ALIVE worker (`/json`). Stopping signals each process group by pid; the worker's group holds
the executors it launched, so none outlive the cluster.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from baton.local.procs import Managed, free_port, port_open

MASTER_NAME = "spark-master"
WORKER_NAME = "spark-worker"


def spark_home() -> Path:
    """The pyspark wheel's directory: it carries bin/, jars/ and sbin/ like a Spark distribution."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise FileNotFoundError(f"pyspark at {home} has no bin/spark-class or jars/; run `make install`")
    return home


def spark_class() -> str:
    path = spark_home() / "bin" / "spark-class"
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return str(path)


@dataclass(frozen=True)
class SparkCluster:
    """Master on host:master_port (UI on master_ui_port) and one worker (UI on worker_ui_port)."""

    state_dir: Path
    master_port: int
    master_ui_port: int
    worker_ui_port: int
    worker_cores: int = 2
    worker_memory: str = "2g"
    # Heap of the master and worker daemons themselves (executors get spark.executor.memory).
    daemon_memory: str = "512m"
    host: str = "127.0.0.1"

    @classmethod
    def on_free_ports(cls, state_dir: Path, **kwargs) -> SparkCluster:
        return cls(
            state_dir=Path(state_dir),
            master_port=free_port(),
            master_ui_port=free_port(),
            worker_ui_port=free_port(),
            **kwargs,
        )

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.master_port}"

    @property
    def master_ui(self) -> str:
        return f"http://{self.host}:{self.master_ui_port}"

    @property
    def master(self) -> Managed:
        return Managed(MASTER_NAME, self.state_dir)

    @property
    def worker(self) -> Managed:
        return Managed(WORKER_NAME, self.state_dir)

    def env(self) -> dict[str, str]:
        home = spark_home()
        return {
            **os.environ,
            "SPARK_HOME": str(home),
            # Bind everything (master, worker, executors, block managers) to loopback.
            "SPARK_LOCAL_IP": self.host,
            "SPARK_WORKER_DIR": str(self.state_dir / "work"),
            "SPARK_LOG_DIR": str(self.state_dir / "logs"),
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            # No spark-defaults.conf or spark-env.sh of the user's leaks into the test cluster.
            "SPARK_CONF_DIR": str(self.state_dir / "conf"),
        }

    def start(self, timeout_s: float = 90.0) -> None:
        (self.state_dir / "conf").mkdir(parents=True, exist_ok=True)
        (self.state_dir / "work").mkdir(parents=True, exist_ok=True)
        env = self.env()
        self.master.start(
            [
                spark_class(),
                "org.apache.spark.deploy.master.Master",
                "--host",
                self.host,
                "--port",
                str(self.master_port),
                "--webui-port",
                str(self.master_ui_port),
            ],
            env=env,
            cwd=self.state_dir,
        )
        self.master.wait_healthy(self.master_alive, timeout_s, f"Spark master on {self.master_url}")
        self.worker.start(
            [
                spark_class(),
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                self.host,
                "--webui-port",
                str(self.worker_ui_port),
                "--cores",
                str(self.worker_cores),
                "--memory",
                self.worker_memory,
                "--work-dir",
                str(self.state_dir / "work"),
                self.master_url,
            ],
            env=env,
            cwd=self.state_dir,
        )
        self.worker.wait_healthy(
            lambda: self.alive_workers() >= 1, timeout_s, f"Spark worker registered with {self.master_url}"
        )

    def status(self) -> dict:
        """The master's own view (`/json` of its web UI): workers, apps, status; {} if unreachable."""
        if not port_open(self.host, self.master_ui_port):
            return {}
        try:
            with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=2) as resp:
                return json.loads(resp.read())
        except (urllib.error.URLError, OSError, ValueError):
            return {}

    def master_alive(self) -> bool:
        return self.status().get("status") == "ALIVE" and port_open(self.host, self.master_port)

    def alive_workers(self) -> int:
        return sum(1 for w in self.status().get("workers", []) if w.get("state") == "ALIVE")

    def active_apps(self) -> list[dict]:
        return list(self.status().get("activeapps", []))

    def running(self) -> bool:
        return self.master.pid() is not None

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the worker (and the executors in its process group), then the master; returns once no
        process of either session is left (an executor can outlive its worker by a moment)."""
        sessions = [pid for pid in (self.worker.pid(), self.master.pid()) if pid is not None]
        stopped_worker = self.worker.stop(timeout_s=timeout_s)
        stopped_master = self.master.stop(timeout_s=timeout_s)
        for sid in sessions:
            _end_session(sid, timeout_s)
        return stopped_worker or stopped_master


def _end_session(sid: int, timeout_s: float) -> None:
    """Wait for the processes of session `sid` to exit; SIGKILL those left after timeout_s."""
    import psutil

    def members() -> list[psutil.Process]:
        out = []
        for proc in psutil.process_iter():
            try:
                if os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                    out.append(proc)
            except (OSError, psutil.Error):
                continue
        return out

    deadline = time.monotonic() + timeout_s
    while (left := members()) and time.monotonic() < deadline:
        time.sleep(0.2)
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            pass
