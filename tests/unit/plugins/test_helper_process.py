"""A Spark helper process an operator runs (the invariants check) ends with the task: on_kill and a
timeout end it and every process it started, not only the first."""

import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

from baton_airflow.operators.steps import HelperProcess

# A parent that starts a child and waits on it, like a driver and its JVM.
TREE = [sys.executable, "-c", "import subprocess, sys; subprocess.run(['sleep', '60']); print('parent done')"]


def session_of(leader: int) -> list[psutil.Process]:
    """The live processes of the session `leader` started (start_new_session: its pid is the sid)."""
    members = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == leader and p.status() != psutil.STATUS_ZOMBIE:
                members.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return members


def test_a_helper_runs_to_its_end_and_returns_its_output():
    done = HelperProcess().run([sys.executable, "-c", "print('ok')"], timeout_s=30)
    assert (done.returncode, done.stdout.strip()) == (0, "ok")


def test_kill_ends_the_helper_and_the_processes_it_started():
    helper = HelperProcess()
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("done", helper.run(TREE, timeout_s=120)))
    worker.start()
    deadline = time.monotonic() + 10
    while (helper.proc is None or len(session_of(helper.proc.pid)) < 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    members = session_of(helper.proc.pid)
    assert len(members) >= 2  # the parent and its sleeping child
    helper.kill(grace_s=5)
    worker.join(10)
    assert not worker.is_alive() and result["done"].returncode != 0
    assert session_of(helper.proc.pid) == []


def test_a_helper_past_its_timeout_is_killed_with_its_children():
    helper = HelperProcess()
    with pytest.raises(subprocess.TimeoutExpired):
        helper.run(TREE, timeout_s=1)
    assert helper.proc.poll() is not None
    assert session_of(helper.proc.pid) == []
