"""The launcher with the real click-count app on the real broker and real Spark: in local mode a
launching task is killed (-9) while it waits and its retry reattaches to the same driver (never a
second copy), the slot survives its launcher and stops gracefully; the same start runs on a local
Spark standalone cluster (master + worker on loopback, from the pyspark wheel's spark-class)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from baton.kafka.admin import delete_topics
from baton.kafka.control_log import write_control
from baton.launch_tmp import launch_tmp_dir
from baton.launcher import Launcher, LaunchSpec
from baton.local.spark_cluster import SparkCluster
from baton.records import ControlRecord, Slot, SlotSpec, SlotState
from baton.settings import REPO_ROOT
from baton.tools.verify import read_output, verify
from tests.support.slots import make_app, produce_clicks, read_status, wait_until_emitted

pytestmark = pytest.mark.integration


def control(app_name: str, revision: int, desired: SlotState) -> ControlRecord:
    return ControlRecord(
        app=app_name, revision=revision, epoch=1, active=Slot.BLUE, slots={Slot.BLUE: SlotSpec(desired, "v1")}
    )


@pytest.fixture
def app(bootstrap, tmp_path):
    app, path = make_app(bootstrap, tmp_path, prefix="launch")
    write_control(bootstrap, control(app.name, 1, SlotState.RUNNING))
    yield app, path
    delete_topics(bootstrap, [t.name for t in app.topics()])


@pytest.fixture
def launcher(tmp_path, app):
    launcher = Launcher(tmp_path / "state")
    yield launcher
    launcher.stop(app[0].name, Slot.BLUE, grace_s=10)  # whatever the test left running


def drivers_of(definition) -> list[int]:
    """Live `spark_apps.runtime.run` processes for this app definition file (any launcher's)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "spark_apps.runtime.run" in cmd and str(definition) in cmd and "baton.driver_wrapper" not in cmd:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p.pid)
            except psutil.Error:
                continue
    return out


def start_task(state, definition, bootstrap) -> subprocess.Popen:
    """An "Airflow task" in its own process: ensure_started, print the identity, then wait for the
    slot to report RUNNING on the status topic (the test kills it during that wait)."""
    code = textwrap.dedent(f"""
        import json, time
        from baton.launcher import Launcher, LaunchSpec
        from baton.records import Slot
        from tests.support.slots import read_status
        rec = Launcher({str(state)!r}).ensure_started(
            LaunchSpec(app={str(definition)!r}, slot=Slot.BLUE, bootstrap={bootstrap!r}))
        print(json.dumps({{"pid": rec.pid, "launch_id": rec.launch_id}}), flush=True)
        while not any(s.state.value == "running" for s in read_status({bootstrap!r}, rec.app)):
            time.sleep(1)
    """)
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )


def test_local_retry_after_kill_reattaches_and_stop_is_graceful(bootstrap, app, launcher):
    app, definition = app
    task = start_task(launcher.state_dir, definition, bootstrap)
    launched = json.loads(task.stdout.readline())
    task.kill()  # kill -9 of the task while it waits for RUNNING
    assert task.wait(30) < 0

    # The slot outlived its launcher, and the retried start reattaches to it.
    alive = launcher.find(app.name, Slot.BLUE)
    assert alive is not None and alive.pid == launched["pid"]
    retried = launcher.ensure_started(LaunchSpec(app=str(definition), slot=Slot.BLUE, bootstrap=bootstrap))
    assert (retried.pid, retried.launch_id) == (launched["pid"], launched["launch_id"])

    truth, _ = produce_clicks(bootstrap, app.input.topic, 4000, users=100)
    wait_until_emitted(bootstrap, app, 4000, timeout_s=300)
    verdict = verify(truth, read_output(bootstrap, app.output.topic, app.output.partitions))
    assert verdict.ok, verdict.summary()

    # One driver, the wrapper's child; every status record of the slot came from it.
    drivers = drivers_of(definition)
    assert len(drivers) == 1 and psutil.Process(drivers[0]).ppid() == retried.pid
    assert {s.pid for s in read_status(bootstrap, app.name)} == {drivers[0]}

    # Its JVM's scratch files (Spark's block manager, the state store's RocksDB copies and library)
    # are in the launch's own directory (its first driver's, `0`), not the host's /tmp (baton.launch_tmp).
    jvm_tmp = launch_tmp_dir(launcher.slot_dir(app.name, Slot.BLUE), retried.launch_id) / "0"
    scratch = sorted(p.name for p in jvm_tmp.iterdir())
    for kind in ("blockmgr-", "librocksdbjni", "spark-"):
        assert any(name.startswith(kind) for name in scratch), (kind, scratch)
    # A crash of the JVM would write its log beside the slot's driver.log, not into the checkout it runs in.
    jvms = [c for c in psutil.Process(drivers[0]).children(recursive=True) if c.name() == "java"]
    crash_log = f"-XX:ErrorFile={launcher.slot_dir(app.name, Slot.BLUE)}/hs_err_pid%p.log"
    assert len(jvms) == 1 and crash_log in jvms[0].cmdline(), [c.cmdline() for c in jvms]

    # Graceful stop: the control-topic request first, then stop() (which signals only if needed).
    write_control(bootstrap, control(app.name, 2, SlotState.STOPPED))
    result = launcher.stop(app.name, Slot.BLUE, grace_s=60, self_stop_s=120)
    # The slot may already have ended by itself (was_running False): either way no signal was needed.
    assert result.graceful
    assert result.exit.code == 0 and not result.exit.killed_by_stop
    assert read_status(bootstrap, app.name)[-1].state is SlotState.STOPPED
    assert launcher.find(app.name, Slot.BLUE) is None and drivers_of(definition) == []
    assert not jvm_tmp.exists()


@pytest.fixture
def cluster(tmp_path):
    cluster = SparkCluster.on_free_ports(tmp_path / "spark", worker_cores=2, worker_memory="2g")
    cluster.start()
    yield cluster
    cluster.stop()


def listener_sessions(port: int) -> set[int]:
    """The session ids of the processes listening on `port` (TCP, this host)."""
    found = set()
    for c in psutil.net_connections(kind="tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            try:
                found.add(os.getsid(c.pid))
            except ProcessLookupError:
                continue
    return found


def session_processes(pid: int | None, settle_s: float = 15.0) -> list[int]:
    """Live (non-zombie) processes of the session led by pid, after letting exiting children finish
    for up to settle_s (an executor can outlive its worker by a moment)."""
    if pid is None:
        return []
    deadline = time.monotonic() + settle_s
    while True:
        out = []
        for p in psutil.pids():
            try:
                if os.getsid(p) == pid and psutil.Process(p).status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except (OSError, psutil.Error):
                continue
        if not out or time.monotonic() > deadline:
            return out
        time.sleep(0.2)


def test_standalone_cluster_runs_the_same_start(bootstrap, app, launcher, cluster):
    app, definition = app
    assert cluster.alive_workers() == 1
    rec = launcher.ensure_started(
        LaunchSpec(
            app=str(definition),
            slot=Slot.BLUE,
            bootstrap=bootstrap,
            master=cluster.master_url,
            conf={"spark.cores.max": "2", "spark.executor.memory": "1g"},
        )
    )
    assert rec.master == cluster.master_url
    truth, _ = produce_clicks(bootstrap, app.input.topic, 3000, users=60)
    wait_until_emitted(bootstrap, app, 3000, timeout_s=300)
    verdict = verify(truth, read_output(bootstrap, app.output.topic, app.output.partitions))
    assert verdict.ok, verdict.summary()

    # It ran on the cluster: the master lists the app, and the worker launched its executor.
    apps = cluster.active_apps()
    assert [a["name"] for a in apps] == [f"baton-{app.name}-blue"] and apps[0]["cores"] >= 1
    executor_logs = list((cluster.state_dir / "work").glob("app-*/*/stderr"))
    assert executor_logs and any("Executor" in p.read_text(errors="replace") for p in executor_logs)

    write_control(bootstrap, control(app.name, 2, SlotState.STOPPED))
    result = launcher.stop(app.name, Slot.BLUE, grace_s=60, self_stop_s=120)
    assert result.graceful and result.exit.code == 0
    deadline = time.monotonic() + 30
    while cluster.active_apps() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert cluster.active_apps() == []

    # Stopping the cluster leaves nothing behind: no daemon, no executor, no listening port.
    master_pid, worker_pid = cluster.master.pid(), cluster.worker.pid()
    assert cluster.stop()
    assert session_processes(master_pid) == [] and session_processes(worker_pid) == []
    # No listener left on the cluster's ports by one of its processes. A listener of another process
    # may be there: the e2e tests run beside these and pick free ports, which a stopped master frees.
    for port in (cluster.master_port, cluster.master_ui_port):
        assert listener_sessions(port) & {master_pid, worker_pid} == set(), port
