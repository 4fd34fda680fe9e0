"""`down` stops a demo's load generator that outlived its demo (the demo killed -9: the generator runs in a
session of its own, so the kill did not reach it), and says so."""

import subprocess
import sys

from baton.local.platform import DEMO_LOADGEN, Platform
from baton.local.procs import Managed, pid_alive
from baton.settings import Settings


def test_down_stops_a_demo_load_generator_left_behind(tmp_path):
    state = tmp_path / "state"
    pid = Managed(DEMO_LOADGEN, state).start([sys.executable, "-c", "import time; time.sleep(120)"])
    said = []
    try:
        Platform(
            Settings(
                state_dir=state, kafka_port=1, airflow_port=2, kafka_bootstrap="127.0.0.1:1", spark_master="local[2]"
            )
        ).down(say=said.append)
        assert not pid_alive(pid)
        assert said == ["demo load generator: stopped"]  # nothing else of the platform was running
        assert not Managed(DEMO_LOADGEN, state).pid_file.exists()
    finally:
        if pid_alive(pid):
            subprocess.run(["kill", "-9", str(pid)], check=False)
