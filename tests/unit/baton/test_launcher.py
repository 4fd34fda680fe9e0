"""The launcher's process bookkeeping, with a harmless long-running Python process instead of Spark
(the argv builder is injected): identity records, reattach instead of a second copy (also after a
kill -9 of the launcher right after it spawned), the pid-reuse guard, stop escalation, bad input,
and the Airflow hook's master precedence. The real driver is tested in tests/integration."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from baton.apps import AppDefinitionError
from baton.driver_wrapper import LAUNCH_ID_ENV
from baton.launcher import (
    ForeignHost,
    Launcher,
    LaunchError,
    LaunchSpec,
    SlotBusy,
    SlotProcess,
    backend_of,
    driver_argv,
)
from baton.records import Slot
from baton.settings import REPO_ROOT

# Ends cleanly on SIGTERM (like the harness); runs until stopped.
POLITE = (
    "import signal,sys,time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); print('REA'+'DY', flush=True); "
    "time.sleep(600)"
)
# Ignores SIGTERM and has a child of its own that ignores it too: only SIGKILL ends them.
STUBBORN = (
    "import signal,subprocess,sys,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "subprocess.Popen([sys.executable,'-c','import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "time.sleep(600)']); time.sleep(600)"
)


def python_argv(code: str):
    def build(spec, app, state_dir, python):
        return [python, "-c", code]

    return build


@pytest.fixture
def app_file(tmp_path):
    path = tmp_path / "demo.yaml"
    path.write_text(
        "name: demo\nmodule: spark_apps.apps.click_counts\nversion: v1\n"
        "input: {topic: clicks, partitions: 2}\noutput: {topic: counts, partitions: 2}\n"
    )
    return path


@pytest.fixture
def state(tmp_path):
    """A state dir whose launches are all killed at teardown, whatever the test did."""
    root = tmp_path / "state"
    yield root
    for record in root.glob("slots/*/*/driver.json"):
        try:
            launch_id = json.loads(record.read_text())["launch_id"]
        except ValueError:  # the corrupt-record test
            continue
        for pid in launch_processes(launch_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def launch_processes(launch_id: str) -> list[int]:
    """Every live process of this user carrying the launch id (wrapper, driver, its children)."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get(LAUNCH_ID_ENV) == launch_id:
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def spec(app_file, **kw) -> LaunchSpec:
    return LaunchSpec(app=str(app_file), slot=kw.pop("slot", Slot.BLUE), bootstrap="127.0.0.1:9", **kw)


def wait_for(cond, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


# --- specs and argv ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"slot": "purple"}, "slot"),
        ({"generation": -1}, "generation"),
        ({"bootstrap": ""}, "bootstrap"),
        ({"bootstrap": "localhost"}, "bootstrap"),
        ({"master": "yarn"}, "master"),
        ({"master": "spark://host"}, "master"),
        ({"conf": {"spark.master": "local[4]"}}, "conf"),
        ({"conf": {"a=b": "c"}}, "conf"),
        ({"starting_offsets": ""}, "starting_offsets"),
    ],
)
def test_bad_spec_names_the_field(kw, field):
    args = {"app": "click_counts", "slot": "blue", "bootstrap": "127.0.0.1:9", **kw}
    with pytest.raises(ValueError, match=f"field '{field}'"):
        LaunchSpec(**args)


def test_backends():
    assert backend_of("local[2]") == backend_of("local") == backend_of("local[*]") == "local"
    assert backend_of("spark://10.0.0.5:7077") == "standalone"
    assert backend_of("k8s://https://kube:6443") == "kubernetes"


def conf_of(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--conf")


def test_local_argv_runs_the_slot_entry_point(app_file, tmp_path):
    s = spec(app_file, generation=3, conf={"spark.sql.shuffle.partitions": "8"}, starting_offsets="latest")
    argv = driver_argv(s, s.definition(), tmp_path, "/venv/bin/python")
    assert argv[:3] == ["/venv/bin/python", "-m", "spark_apps.runtime.run"]
    assert argv[argv.index("--app") + 1] == str(app_file.resolve())
    assert argv[argv.index("--generation") + 1] == "3"
    assert argv[argv.index("--state-dir") + 1] == str(tmp_path)
    assert argv[argv.index("--starting-offsets") + 1] == "latest"
    assert conf_of(argv) == {
        "spark.master": "local[2]",
        "spark.sql.shuffle.partitions": "8",
        "spark.ui.showConsoleProgress": "false",
    }


def test_standalone_argv_gives_executors_the_venv_and_the_repo(app_file, tmp_path):
    s = spec(app_file, master="spark://127.0.0.1:7077", conf={"spark.cores.max": "1"})
    conf = conf_of(driver_argv(s, s.definition(), tmp_path, "/venv/bin/python"))
    assert conf["spark.master"] == "spark://127.0.0.1:7077"
    assert conf["spark.pyspark.python"] == "/venv/bin/python"
    assert conf["spark.executorEnv.PYTHONPATH"] == str(REPO_ROOT)
    assert conf["spark.driver.host"] == "127.0.0.1"
    assert conf["spark.cores.max"] == "1"
    # A remote cluster's executors use their own image's Python and code, not this machine's.
    remote = spec(app_file, master="spark://spark-master:7077")
    remote_conf = conf_of(driver_argv(remote, remote.definition(), tmp_path, "py"))
    assert not {"spark.driver.host", "spark.pyspark.python", "spark.executorEnv.PYTHONPATH"} & set(remote_conf)


def test_kubernetes_is_documented_not_launched(app_file, tmp_path):
    s = spec(app_file, master="k8s://https://kube:6443")
    with pytest.raises(LaunchError, match="docs/backends.md"):
        driver_argv(s, s.definition(), tmp_path, "py")


def test_missing_app_definition_is_an_error_before_anything_runs(tmp_path):
    with pytest.raises(AppDefinitionError, match="no app"):
        Launcher(tmp_path).ensure_started(
            LaunchSpec(app=str(tmp_path / "nope.yaml"), slot=Slot.BLUE, bootstrap="127.0.0.1:9")
        )
    assert not (tmp_path / "slots").exists()


# --- start, reattach, stop -----------------------------------------------------------------------------


def test_start_records_identity_and_detaches(app_file, state):
    launcher = Launcher(state, argv_builder=python_argv(POLITE))
    rec = launcher.ensure_started(spec(app_file, generation=2))
    on_disk = launcher.read_record("demo", "blue")
    assert on_disk == rec and rec.pid and rec.create_time
    assert (rec.app, rec.slot, rec.generation, rec.version) == ("demo", Slot.BLUE, 2, "v1")
    assert rec.log_path == str(state.resolve() / "slots/demo/blue/driver.log")
    wrapper = psutil.Process(rec.pid)
    assert wrapper.create_time() == pytest.approx(rec.create_time)
    assert os.getsid(rec.pid) == rec.pid  # leads its own session: the caller's group signals miss it
    assert wrapper.ppid() != os.getpid()  # not our child: walking the caller's process tree misses it
    assert len(launch_processes(rec.launch_id)) == 2  # the wrapper and the driver
    assert launcher.find("demo", "blue") == rec


def test_second_start_reattaches_and_a_different_launch_is_refused(app_file, state):
    launcher = Launcher(state, argv_builder=python_argv(POLITE))
    first = launcher.ensure_started(spec(app_file))
    again = Launcher(state, argv_builder=python_argv(POLITE)).ensure_started(spec(app_file))
    assert again == first
    assert len(launch_processes(first.launch_id)) == 2
    with pytest.raises(SlotBusy, match="generation 0 \\(asked 1\\)"):
        launcher.ensure_started(spec(app_file, generation=1))
    with pytest.raises(SlotBusy, match="master"):
        launcher.ensure_started(spec(app_file, master="local[4]"))
    assert launcher.find("demo", "blue") == first
    # The other slot is independent.
    green = launcher.ensure_started(spec(app_file, slot=Slot.GREEN))
    assert green.pid != first.pid and launcher.find("demo", "green") == green


def run_launcher_child(state: Path, app_file: Path, then: str, start_at: float = 0.0) -> subprocess.Popen:
    """ensure_started in a separate process (an Airflow task), from wall-clock time start_at on,
    which then does `then`."""
    code = textwrap.dedent(f"""
        import os, signal, sys, time
        from baton.launcher import Launcher, LaunchSpec
        from baton.records import Slot
        def build(spec, app, state_dir, python):
            return [python, "-c", {POLITE!r}]
        class Dying(Launcher):
            def _spawn(self, rec, app, **kw):
                super()._spawn(rec, app, **kw)
                if {then!r} == "die-after-spawn":
                    os.kill(os.getpid(), signal.SIGKILL)  # between spawning and recording the pid
        launcher = Dying({str(state)!r}, argv_builder=build)
        time.sleep(max(0.0, {start_at!r} - time.time()))
        rec = launcher.ensure_started(
            LaunchSpec(app={str(app_file)!r}, slot=Slot.BLUE, bootstrap="127.0.0.1:9"))
        print(rec.pid, flush=True)
        if {then!r} == "wait":
            time.sleep(600)  # "waiting for RUNNING": the test kills us here
    """)
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )


def test_killed_task_mid_wait_then_retry_reattaches(app_file, state):
    task = run_launcher_child(state, app_file, then="wait")
    pid = int(task.stdout.readline())
    task.kill()  # kill -9 of the task while it waits
    task.wait(10)
    launcher = Launcher(state, argv_builder=python_argv(POLITE))
    rec = launcher.find("demo", "blue")
    assert rec is not None and rec.pid == pid  # the slot survived its launcher
    assert launcher.ensure_started(spec(app_file)).pid == pid
    assert len(launch_processes(rec.launch_id)) == 2


def test_launcher_killed_between_spawn_and_record_is_adopted_not_doubled(app_file, state):
    task = run_launcher_child(state, app_file, then="die-after-spawn")
    assert task.wait(30) == -signal.SIGKILL
    launcher = Launcher(state, argv_builder=python_argv(POLITE))
    intent = launcher.read_record("demo", "blue")
    assert intent.pid is None  # only the intent was recorded
    rec = launcher.ensure_started(spec(app_file))
    assert rec.launch_id == intent.launch_id and rec.pid is not None
    assert launcher.read_record("demo", "blue") == rec  # the adopted identity is now on disk
    assert len(launch_processes(intent.launch_id)) == 2
    assert wrappers_of(state) == [rec.pid]  # no second launch


def wrappers_of(state: Path) -> list[int]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "baton.driver_wrapper" in cmd and any(str(state.resolve()) in a for a in cmd):
            out.append(p.pid)
    return out


def test_intent_without_a_process_is_relaunched(app_file, state):
    launcher = Launcher(state, argv_builder=python_argv(POLITE))
    slot_dir = launcher.slot_dir("demo", "blue")
    slot_dir.mkdir(parents=True)
    intent = SlotProcess(
        app="demo",
        slot=Slot.BLUE,
        generation=0,
        version="v1",
        definition=str(app_file),
        master="local[2]",
        launch_id="dead0",
        argv=[],
        log_path=str(slot_dir / "driver.log"),
        exit_file=str(slot_dir / "driver.exit.json"),
        host=launcher.host,
        launched_at=1.0,
    )
    (slot_dir / "driver.json").write_text(intent.to_json())
    assert launcher.find("demo", "blue") is None
    rec = launcher.ensure_started(spec(app_file))
    assert rec.launch_id != "dead0" and launch_processes(rec.launch_id)


def test_concurrent_starters_launch_one_copy(app_file, state):
    start_at = time.time() + 3  # all three past their imports, then racing for the slot
    tasks = [run_launcher_child(state, app_file, then="exit", start_at=start_at) for _ in range(3)]
    pids = {int(t.stdout.readline()) for t in tasks}
    for t in tasks:
        assert t.wait(30) == 0
    assert len(pids) == 1
    rec = Launcher(state).find("demo", "blue")
    assert rec.pid == pids.pop() and len(launch_processes(rec.launch_id)) == 2


def test_pid_reuse_is_not_mistaken_for_the_slot(app_file, state, tmp_path):
    launcher = Launcher(state, argv_builder=python_argv(POLITE))
    rec = launcher.ensure_started(spec(app_file))
    assert launcher.stop("demo", "blue", grace_s=10).was_running
    # An unrelated process now holds the recorded pid (simulated: the record is pointed at it).
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        launcher._write_record(replace(rec, pid=stranger.pid))
        assert launcher.find("demo", "blue") is None
        result = launcher.stop("demo", "blue", grace_s=1)
        assert not result.was_running
        assert stranger.poll() is None  # never signalled
        fresh = launcher.ensure_started(spec(app_file))
        assert fresh.launch_id != rec.launch_id
    finally:
        stranger.kill()
        stranger.wait()


def test_graceful_stop_records_exit_code_and_is_idempotent(app_file, state):
    launcher = Launcher(state, argv_builder=python_argv(POLITE))
    rec = launcher.ensure_started(spec(app_file))
    wait_for(lambda: "\nREADY\n" in Path(rec.log_path).read_text())  # its SIGTERM handler is installed
    result = launcher.stop("demo", "blue", grace_s=10)
    assert result.was_running and result.graceful and result.pid == rec.pid
    assert result.exit.code == 0 and not result.exit.killed_by_stop
    assert launch_processes(rec.launch_id) == []
    assert "exited with code 0" in Path(rec.log_path).read_text()
    again = launcher.stop("demo", "blue", grace_s=10)
    assert not again.was_running and again.exit == result.exit
    assert launcher.find("demo", "blue") is None


def test_stubborn_slot_is_killed_after_the_grace_period(app_file, state):
    launcher = Launcher(state, argv_builder=python_argv(STUBBORN))
    rec = launcher.ensure_started(spec(app_file))
    wait_for(lambda: len(launch_processes(rec.launch_id)) == 3)  # wrapper, driver, the driver's child
    result = launcher.stop("demo", "blue", grace_s=1)
    assert result.was_running and not result.graceful
    assert result.exit.code == -signal.SIGKILL and result.exit.killed_by_stop
    assert launch_processes(rec.launch_id) == []


def test_stop_first_lets_the_slot_end_by_itself(app_file, state):
    # Ignores SIGTERM but ends by itself (as after a control-topic stop request) within a second.
    launcher = Launcher(
        state,
        argv_builder=python_argv("import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1)"),
    )
    launcher.ensure_started(spec(app_file))
    result = launcher.stop("demo", "blue", grace_s=0.5, self_stop_s=20)
    assert result.was_running and result.graceful and result.exit.code == 0


def test_wait_gone_reports_how_the_driver_ended(app_file, state):
    launcher = Launcher(state, argv_builder=python_argv("import time,sys; time.sleep(0.5); sys.exit(3)"))
    launcher.ensure_started(spec(app_file))
    assert launcher.wait_gone("demo", "blue", timeout_s=20).code == 3
    assert launcher.find("demo", "blue") is None


def test_driver_that_cannot_start_reports_127(app_file, state):
    def missing(spec, app, state_dir, python):
        return [str(state / "no-such-binary")]

    launcher = Launcher(state, argv_builder=missing)
    launcher.ensure_started(spec(app_file))
    assert launcher.wait_gone("demo", "blue", timeout_s=20).code == 127
    assert "driver did not start" in Path(launcher.read_record("demo", "blue").log_path).read_text()


def test_wait_gone_times_out_on_a_running_slot(app_file, state):
    launcher = Launcher(state, argv_builder=python_argv(POLITE))
    launcher.ensure_started(spec(app_file))
    with pytest.raises(TimeoutError, match="still running"):
        launcher.wait_gone("demo", "blue", timeout_s=0.5)


def test_record_from_another_host_is_refused_not_relaunched(app_file, state):
    launcher = Launcher(state, argv_builder=python_argv(POLITE))
    rec = launcher.ensure_started(spec(app_file))
    launcher._write_record(replace(rec, host="elsewhere"))
    with pytest.raises(ForeignHost, match="elsewhere"):
        launcher.find("demo", "blue")
    with pytest.raises(ForeignHost):
        launcher.ensure_started(spec(app_file))
    launcher._write_record(rec)


def test_corrupt_record_names_the_file(app_file, state):
    launcher = Launcher(state)
    launcher.slot_dir("demo", "blue").mkdir(parents=True)
    launcher.record_file("demo", "blue").write_text("{not json")
    with pytest.raises(LaunchError, match="driver.json: unreadable slot identity record"):
        launcher.find("demo", "blue")


# --- the Airflow hook's settings -------------------------------------------------------------------


@pytest.fixture
def hook_cls(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_BATON_SPARK", raising=False)
    monkeypatch.delenv("BATON_SPARK_MASTER", raising=False)
    from baton_airflow.hooks.spark import BatonSparkHook

    return BatonSparkHook


def set_conn(monkeypatch, **conn):
    monkeypatch.setenv("AIRFLOW_CONN_BATON_SPARK", json.dumps({"conn_type": "generic", **conn}))


def test_hook_master_default_then_env(hook_cls, monkeypatch):
    assert hook_cls().master == "local[2]"
    monkeypatch.setenv("BATON_SPARK_MASTER", "local[3]")
    assert hook_cls().master == "local[3]"


def test_hook_master_from_connection_host_port_over_env(hook_cls, monkeypatch):
    monkeypatch.setenv("BATON_SPARK_MASTER", "local[3]")
    set_conn(monkeypatch, host="spark-master", port=7077)
    assert hook_cls().master == "spark://spark-master:7077"


def test_hook_master_from_connection_extra_over_host(hook_cls, monkeypatch):
    set_conn(monkeypatch, host="spark-master", port=7077, extra={"master": "local[4]"})
    assert hook_cls().master == "local[4]"


def test_hook_argument_wins(hook_cls, monkeypatch):
    monkeypatch.setenv("BATON_SPARK_MASTER", "local[3]")
    set_conn(monkeypatch, extra={"master": "local[4]"})
    assert hook_cls(master="spark://127.0.0.1:7077").master == "spark://127.0.0.1:7077"


def test_hook_conf_from_connection_under_the_call(hook_cls, monkeypatch, tmp_path):
    set_conn(monkeypatch, extra={"master": "local[4]", "conf": {"spark.cores.max": "1", "spark.x": "conn"}})
    s = hook_cls(state_dir=tmp_path).spec("click_counts", "green", "127.0.0.1:9", conf={"spark.x": "call"})
    assert (s.master, s.slot, s.state_dir) == ("local[4]", Slot.GREEN, tmp_path)
    assert dict(s.conf) == {"spark.cores.max": "1", "spark.x": "call"}


def test_hook_rejects_a_bad_connection_master(hook_cls, monkeypatch):
    set_conn(monkeypatch, extra={"master": "yarn"})
    with pytest.raises(ValueError, match="connection baton_spark: field 'master'"):
        _ = hook_cls().master


def test_hook_starts_and_stops_through_the_launcher(hook_cls, app_file, state):
    hook = hook_cls(state_dir=state)
    hook.launcher = lambda: Launcher(state, argv_builder=python_argv(POLITE))
    rec = hook.ensure_started(str(app_file), "blue", "127.0.0.1:9")
    wait_for(lambda: "\nREADY\n" in Path(rec.log_path).read_text())
    assert hook.find("demo", "blue") == rec
    assert hook.describe(rec)["pid"] == rec.pid
    assert hook.stop("demo", "blue", grace_s=10).exit.code == 0
