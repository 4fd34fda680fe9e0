"""Platform settings: one place, one precedence.

Precedence (highest first): an explicit argument > environment variable (BATON_*) > default here.
Airflow hooks add a layer on top: a task argument > the Airflow Connection's extra > these settings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# Run from a checkout of this repository (make up, make test) or from the package installed into an
# Airflow deployment (pip install "baton[airflow]"), where REPO_ROOT is site-packages: nothing of the
# deployment's may go there.
IN_CHECKOUT = (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "dags").is_dir()


def deployment_dir() -> Path:
    """Where an installed Baton keeps its state and looks for app definitions by default: beside the
    deployment's Airflow ($AIRFLOW_HOME/baton, else ~/airflow/baton as Airflow's own default home)."""
    airflow_home = os.environ.get("AIRFLOW_HOME") or str(Path.home() / "airflow")
    return Path(airflow_home) / "baton"


def default_state_dir() -> Path:
    """BATON_HOME's default: .state/ in a checkout, $AIRFLOW_HOME/baton/state when installed."""
    return REPO_ROOT / ".state" if IN_CHECKOUT else deployment_dir() / "state"


def default_apps_dir() -> Path:
    """BATON_APPS_DIR's default: include/apps in a checkout, $AIRFLOW_HOME/baton/apps when installed."""
    return REPO_ROOT / "include" / "apps" if IN_CHECKOUT else deployment_dir() / "apps"


# Topics of the control plane, shared by every app.
CONTROL_TOPIC = "baton.control"
STATUS_TOPIC = "baton.status"
# Every running slot's lease, renewed every second (baton.leases); compaction keeps the newest per slot.
LEASES_TOPIC = "baton.leases"
LEASES_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": "3600000"}


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} must be an integer") from None


@dataclass(frozen=True)
class Settings:
    state_dir: Path
    kafka_port: int
    airflow_port: int
    kafka_bootstrap: str
    spark_master: str
    # BATON_KAFKA_BOOTSTRAP names a cluster other than the embedded broker's port: `make up` starts no
    # broker and makes Baton's topics there.
    external_kafka: bool = False
    # The embedded PostgreSQL server's port (Airflow's metadata); 0: a free port chosen at its first
    # start and kept with its data.
    postgres_port: int = 0

    @classmethod
    def load(cls) -> Settings:
        state_dir = Path(os.environ.get("BATON_HOME") or default_state_dir()).resolve()
        kafka_port = _env_int("BATON_KAFKA_PORT", 29092)
        embedded = f"127.0.0.1:{kafka_port}"
        bootstrap = os.environ.get("BATON_KAFKA_BOOTSTRAP", "").strip() or embedded
        return cls(
            state_dir=state_dir,
            kafka_port=kafka_port,
            airflow_port=_env_int("BATON_AIRFLOW_PORT", 28080),
            kafka_bootstrap=bootstrap,
            spark_master=os.environ.get("BATON_SPARK_MASTER", "local[2]"),
            external_kafka=bootstrap not in (embedded, f"localhost:{kafka_port}"),
            postgres_port=_env_int("BATON_POSTGRES_PORT", 25432),
        )
