"""`baton reset` stops the platform, deletes what the platform keeps under its state dir (saying what each
is), leaves anything else there alone, and never touches an external cluster."""

import subprocess
import sys

from baton.local.platform import Platform
from baton.local.procs import Managed, pid_alive
from baton.local.reset import KEPT, reset
from baton.settings import Settings


def platform(state, external=False):
    return Platform(
        Settings(
            state_dir=state,
            kafka_port=1,
            airflow_port=2,
            kafka_bootstrap="127.0.0.1:1",
            spark_master="local[2]",
            external_kafka=external,
        )
    )


def test_reset_stops_the_platform_and_deletes_its_data_saying_what(tmp_path):
    state = tmp_path / "state"
    for name in KEPT:
        (state / name / "inner").mkdir(parents=True)
        (state / name / "inner" / "file").write_text("x")
    (state / "airflow.log").write_text("log")
    (state / "mine.txt").write_text("a user's file")
    pid = Managed("tansu", state).start([sys.executable, "-c", "import time; time.sleep(120)"])
    said = []
    try:
        deleted = reset(platform(state), say=said.append)
        assert not pid_alive(pid)
    finally:
        if pid_alive(pid):
            subprocess.run(["kill", "-9", str(pid)], check=False)
    assert "broker: stopped" in said
    assert sorted(p.name for p in state.iterdir()) == ["mine.txt"]
    assert {p.name for p in deleted} >= set(KEPT) | {"airflow.log"}
    for name, what in KEPT.items():
        assert f"deleted {state / name}: {what}" in said
    assert f"left alone in {state} (not the platform's): mine.txt" in said
    assert "the embedded broker keeps its topics in memory: they went when it stopped" in said


def test_reset_keeps_an_external_clusters_topics_and_says_so(tmp_path):
    said = []
    assert reset(platform(tmp_path / "absent", external=True), say=said.append) == []
    assert said[-1] == f"nothing to delete: {tmp_path / 'absent'} does not exist"
    (tmp_path / "state").mkdir()
    said.clear()
    reset(platform(tmp_path / "state", external=True), say=said.append)
    assert any(s.startswith("kept: the topics on the Kafka cluster at 127.0.0.1:1") for s in said), said
