"""Each launch's own temporary directory for its driver JVM (baton.launch_tmp): the launch is told it,
its files there are removed when it ends gracefully (the wrapper), when its whole process group was
killed with its wrapper (the next spawn, a stop), emptied when its wrapper restarts its driver, never while it or a staged launch beside it runs. The driver is a
small Python process that writes into the directory as a JVM would; the real JVM's use of it is in
tests/integration/baton/test_launcher.py."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from baton.driver_wrapper import JVM_TMPDIR_ENV
from baton.launch_tmp import launch_tmp_dir, remove_gone
from baton.launcher import Launcher
from spark_apps.runtime.spark import driver_java_options
from tests.unit.baton.test_launcher import app_file, launch_processes, python_argv, spec, state, wait_for  # noqa: F401
from tests.unit.baton.test_launcher_staged import STAGEABLE

# Writes a scratch file into its temp dir (as the JVM unpacks RocksDB's library there), says so, runs until stopped.
SCRATCH = (
    "import os,signal,sys,time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); "
    f"d=os.environ['{JVM_TMPDIR_ENV}']; open(os.path.join(d,'librocksdbjni.so'),'w').write('x'*1000); "
    "print('WRO'+'TE '+d, flush=True); time.sleep(600)"
)  # not WROTE in the logged argv


def tmp_of(launcher: Launcher, launch_id: str) -> Path:
    return launch_tmp_dir(launcher.slot_dir("demo", "blue"), launch_id)


def wrote(rec) -> bool:
    return "\nWROTE " in Path(rec.log_path).read_text()


def kill_launch(launch_id: str) -> None:
    """kill -9 of every process of the launch at once (a host's OOM killer, a crash of its session)."""
    for pid in launch_processes(launch_id):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: launch_processes(launch_id) == [])


def test_remove_gone_keeps_live_launches_and_removes_the_rest(tmp_path):
    assert remove_gone(tmp_path, {"a"}) == []  # no directory yet
    for name in ("a", "b", "c"):
        (tmp_path / "tmp" / name / "blockmgr-1").mkdir(parents=True)
    (tmp_path / "tmp" / "stray-file").write_text("x")
    assert remove_gone(tmp_path, {"a"}) == ["b", "c", "stray-file"]
    assert sorted(p.name for p in (tmp_path / "tmp").iterdir()) == ["a"]
    assert (tmp_path / "tmp" / "a" / "blockmgr-1").is_dir()


def test_a_launch_gets_its_own_dir_and_a_graceful_end_removes_it(app_file, state):
    launcher = Launcher(state, argv_builder=python_argv(SCRATCH))
    rec = launcher.ensure_started(spec(app_file))
    wait_for(lambda: wrote(rec))
    assert f"WROTE {tmp_of(launcher, rec.launch_id) / '0'}\n" in Path(rec.log_path).read_text()  # its first driver's
    assert (tmp_of(launcher, rec.launch_id) / "0" / "librocksdbjni.so").is_file()
    assert launcher.stop("demo", "blue", grace_s=10).graceful
    assert not tmp_of(launcher, rec.launch_id).exists()


def test_a_killed_launch_leaves_its_dir_until_the_next_spawn_or_stop(app_file, state):
    launcher = Launcher(state, argv_builder=python_argv(SCRATCH))
    first = launcher.ensure_started(spec(app_file))
    wait_for(lambda: wrote(first))
    kill_launch(first.launch_id)  # wrapper included: nobody removes it now

    assert (tmp_of(launcher, first.launch_id) / "0" / "librocksdbjni.so").is_file()

    second = launcher.ensure_started(spec(app_file))  # as baton_health restarts a dead slot
    assert second.launch_id != first.launch_id
    assert not tmp_of(launcher, first.launch_id).exists()
    wait_for(lambda: (tmp_of(launcher, second.launch_id) / "0" / "librocksdbjni.so").is_file())

    kill_launch(second.launch_id)
    assert not launcher.stop("demo", "blue", grace_s=10).was_running  # the stop of a slot already gone
    assert not tmp_of(launcher, second.launch_id).exists()


def test_a_staged_launch_spawned_beside_the_running_one_keeps_both_dirs(app_file, state):
    launcher = Launcher(state, argv_builder=python_argv(STAGEABLE))
    running = launcher.ensure_started(spec(app_file))
    wait_for(lambda: f"RUNNING {running.launch_id}" in Path(running.log_path).read_text())
    staged = launcher.stage(spec(app_file, generation=1))
    assert staged is not None
    assert tmp_of(launcher, running.launch_id).is_dir() and tmp_of(launcher, staged.launch_id).is_dir()
    launcher.stop("demo", "blue", grace_s=10, keep_staged=True)
    assert not tmp_of(launcher, running.launch_id).exists()
    assert tmp_of(launcher, staged.launch_id).is_dir()  # its launch holds, promoted next
    assert launcher.ensure_started(spec(app_file, generation=1)).launch_id == staged.launch_id
    assert tmp_of(launcher, staged.launch_id).is_dir()
    launcher.stop("demo", "blue", grace_s=10)
    assert list((launcher.slot_dir("demo", "blue") / "tmp").iterdir()) == []


def test_the_driver_jvm_is_given_the_launch_dir_and_an_apps_own_option_comes_after(monkeypatch, tmp_path):
    monkeypatch.delenv(JVM_TMPDIR_ENV, raising=False)
    assert "java.io.tmpdir" not in driver_java_options("")
    monkeypatch.setenv(JVM_TMPDIR_ENV, str(tmp_path))
    assert f"-Djava.io.tmpdir={tmp_path}" in driver_java_options("").split()
    options = driver_java_options("-Djava.io.tmpdir=/mine").split()
    assert options.index(f"-Djava.io.tmpdir={tmp_path}") < options.index("-Djava.io.tmpdir=/mine")  # the last wins
    monkeypatch.setenv(JVM_TMPDIR_ENV, "/a dir/with a space")  # Spark would split it: left out
    assert "java.io.tmpdir" not in driver_java_options("")
    assert "ErrorFile" not in driver_java_options("")


def test_a_crash_of_the_driver_jvm_logs_beside_the_slots_driver_log_not_in_the_checkout(monkeypatch, tmp_path):
    slot_dir = tmp_path / "slots" / "demo" / "blue"
    monkeypatch.setenv(JVM_TMPDIR_ENV, str(launch_tmp_dir(slot_dir, "l-1")))
    assert f"-XX:ErrorFile={slot_dir}/hs_err_pid%p.log" in driver_java_options("").split()
    monkeypatch.setenv(JVM_TMPDIR_ENV, str(launch_tmp_dir(slot_dir, "l-1") / "2"))  # a restarted driver's
    assert f"-XX:ErrorFile={slot_dir}/hs_err_pid%p.log" in driver_java_options("").split()
    monkeypatch.delenv(JVM_TMPDIR_ENV)  # not a launch (a test's session, a tool): the JVM's default
    assert "ErrorFile" not in driver_java_options("")
