"""Shared fixtures. Integration tests share one real Tansu broker per session; each test uses
its own uniquely named topics (see `topic_names`) and deletes them afterwards."""

from __future__ import annotations

import atexit
import gc
import logging
import os
import shutil
import tempfile
import uuid
from types import SimpleNamespace

# Airflow reads its home at first import: tests that import hooks or DAGs get a throwaway one, never ~/airflow.
# Removed when the test process ends (atexit: Airflow may write its logs there until then).
if "AIRFLOW_HOME" not in os.environ:
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="baton-test-airflow-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
# py4j logs "Closing down clientserver connection" from a finalizer at interpreter exit, when pytest
# has closed the stream its handler writes to ("--- Logging error ---" after the summary).
logging.getLogger("py4j").setLevel(logging.WARNING)

import pytest

from baton.kafka.admin import TopicSpec, delete_topics, ensure_topics
from baton.kafka.control_log import close_writers
from baton.local.broker import Broker
from baton.local.procs import free_port


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    # BATON_TEST_KAFKA_BOOTSTRAP: run against a broker someone else runs (e.g. Apache Kafka from
    # ../shared/kafka) instead of the embedded Tansu; nothing is started or stopped then.
    external = os.environ.get("BATON_TEST_KAFKA_BOOTSTRAP")
    if external:
        yield SimpleNamespace(bootstrap=external)
        close_writers(external)
        return
    b = Broker(state_dir=tmp_path_factory.mktemp("broker"), port=free_port())
    b.start()
    yield b
    # Clients still open would retry the stopped broker until the process ends, burying the summary in
    # their log lines: the cached control writers, and clients in frames only a collection frees.
    close_writers(b.bootstrap)
    gc.collect()
    b.stop()


@pytest.fixture
def bootstrap(broker) -> str:
    return broker.bootstrap


@pytest.fixture
def topics(bootstrap):
    """Factory: topics(name=partitions, ...) creates uniquely suffixed topics, deleted after the test."""
    made: list[str] = []

    def make(**partitions: int) -> dict[str, str]:
        suffix = uuid.uuid4().hex[:8]
        names = {k: f"{k}-{suffix}" for k in partitions}
        ensure_topics(bootstrap, [TopicSpec(names[k], p) for k, p in partitions.items()])
        made.extend(names.values())
        return names

    yield make
    delete_topics(bootstrap, made)
