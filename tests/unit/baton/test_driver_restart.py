"""The wrapper restarts a dead driver in place (baton.driver_wrapper), with a small Python process as the
driver: a kill of the driver's process group is a restart within a fraction of a second, under the same
launch and lock, with the dead JVM's scratch files gone; a crash loop ends at the app's limit with the
reason; a clean stop, a refusal (exit 2, 3, 4) and a stop during the backoff are never restarted."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from baton.driver_wrapper import JVM_TMPDIR_ENV, RELAUNCH_ENV, RestartPolicy, describe_exit
from baton.launcher import Launcher, restarts_file_of
from tests.unit.baton.test_launcher import launch_processes, python_argv, spec, state, wait_for  # noqa: F401

# Says which start it is (the relaunch record its wrapper gave it, if any) and its pid, leaves a scratch
# file in its JVM temp dir, then runs until stopped (exit 0 on SIGTERM, as the harness).
DRIVER = (
    "import os,signal,sys,time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); "
    f"d=os.environ['{JVM_TMPDIR_ENV}']; print('START', os.getpid(), sorted(os.listdir(d)), "
    f"os.environ.get('{RELAUNCH_ENV}', '-'), flush=True); "
    "open(os.path.join(d,'scratch-%d' % os.getpid()),'w').write('x'); time.sleep(600)"
)


def app_yaml(
    tmp_path: Path, backoff_s: float = 0.5, limit: int = 3, window_s: int = 60, stable_s: float = 60, spare=False
) -> Path:
    path = tmp_path / "demo.yaml"
    path.write_text(
        "name: demo\nmodule: spark_apps.apps.click_counts\nversion: v1\n"
        "input: {topic: clicks, partitions: 2}\noutput: {topic: counts, partitions: 2}\n"
        f"spare_driver: {str(spare).lower()}\n"
        f"health: {{max_restarts: {limit}, restart_backoff_s: {backoff_s}, restart_window_s: {window_s}, restart_stable_s: {stable_s}}}\n"
    )
    return path


def starts(rec) -> list[list[str]]:
    """The START lines of the launch's log: [pid, scratch files seen, relaunch record]."""
    out = []
    for line in Path(rec.log_path).read_text().splitlines():
        if line.startswith("START "):
            pid, rest = line[6:].split(" ", 1)
            files, _, relaunch = rest.rpartition("] ")
            out.append([pid, files + "]", relaunch])
    return out


def driver_pids(rec) -> list[int]:
    return [p for p in launch_processes(rec.launch_id) if p != rec.pid]


def test_a_killed_driver_is_restarted_in_place_at_once(tmp_path, state):
    launcher = Launcher(state, argv_builder=python_argv(DRIVER))
    rec = launcher.ensure_started(spec(app_yaml(tmp_path)))
    wait_for(lambda: len(starts(rec)) == 1)
    first = int(starts(rec)[0][0])
    assert os.getpgid(first) == first != os.getpgid(rec.pid)  # a group of its own, apart from its wrapper
    t_kill = time.monotonic()
    os.killpg(first, signal.SIGKILL)  # the driver and whatever it started: a crash
    wait_for(lambda: len(starts(rec)) == 2)
    restart_s = time.monotonic() - t_kill
    pid, seen, relaunch = starts(rec)[1]
    assert int(pid) != first and restart_s < 2.0, restart_s
    assert seen == "[]"  # the dead driver's scratch files were removed before it started again
    assert json.loads(relaunch)["restart"] == 1 and json.loads(relaunch)["code"] == -signal.SIGKILL
    assert launcher.find("demo", "blue") == rec  # the same launch, its lock held throughout
    said = launcher.relaunch(rec)
    assert said is not None and (said.state, said.restarts, said.code) == ("relaunched", 1, -signal.SIGKILL)
    assert said.driver_pid == int(pid)
    assert "restarting the driver (restart 1 of 3): it was killed by SIGKILL" in Path(rec.log_path).read_text()
    result = launcher.stop("demo", "blue", grace_s=10)  # a stop is never restarted
    assert result.graceful and result.exit.code == 0
    assert launch_processes(rec.launch_id) == []


def test_a_crash_loop_ends_at_the_limit_with_the_reason(tmp_path, state):
    crash = "import sys,time; time.sleep(0.2); sys.exit(1)"
    launcher = Launcher(state, argv_builder=python_argv(crash))
    rec = launcher.ensure_started(spec(app_yaml(tmp_path, backoff_s=0.2, limit=2)))
    ended = launcher.wait_gone("demo", "blue", timeout_s=30)
    assert ended is not None and ended.code == 1
    exit_file = json.loads(Path(rec.exit_file).read_text())
    assert exit_file["restarts"] == 2 and exit_file["gave_up"] == "crash loop: 2 restarts in 60 s (limit 2)"
    ends = [ln for ln in Path(rec.log_path).read_text().splitlines() if ln.startswith("[baton] driver ")]
    assert len(ends) == 3 and all(" exited with code 1 after " in ln for ln in ends)
    assert launcher.relaunch(rec) is not None and launcher.relaunch(rec).state == "gave_up"


@pytest.mark.parametrize("code", [0, 2, 3, 4])
def test_an_end_a_restart_cannot_change_is_not_restarted(tmp_path, state, code):
    launcher = Launcher(state, argv_builder=python_argv(f"import sys; sys.exit({code})"))
    launcher.ensure_started(spec(app_yaml(tmp_path)))
    assert launcher.wait_gone("demo", "blue", timeout_s=20).code == code
    assert "restarting" not in Path(launcher.read_record("demo", "blue").log_path).read_text()


def test_a_stop_during_the_backoff_ends_the_launch(tmp_path, state):
    launcher = Launcher(state, argv_builder=python_argv(DRIVER))
    rec = launcher.ensure_started(spec(app_yaml(tmp_path, backoff_s=30, window_s=600)))
    wait_for(lambda: len(starts(rec)) == 1)
    os.killpg(int(starts(rec)[0][0]), signal.SIGKILL)
    wait_for(lambda: len(starts(rec)) == 2)
    os.killpg(int(starts(rec)[1][0]), signal.SIGKILL)  # the second death waits 30 s
    wait_for(lambda: (r := launcher.relaunch(rec)) is not None and r.state == "waiting")
    result = launcher.stop("demo", "blue", grace_s=10)
    assert result.graceful and len(starts(rec)) == 2 and launch_processes(rec.launch_id) == []


def test_a_launcher_told_not_to_restart_leaves_a_dead_driver_dead(tmp_path, state):
    launcher = Launcher(state, argv_builder=python_argv(DRIVER), restart_driver=False)
    rec = launcher.ensure_started(spec(app_yaml(tmp_path)))
    wait_for(lambda: len(starts(rec)) == 1)
    os.killpg(int(starts(rec)[0][0]), signal.SIGKILL)
    assert launcher.wait_gone("demo", "blue", timeout_s=20).code == -signal.SIGKILL


def test_a_driver_that_ran_well_before_it_died_is_not_a_crash_loop(tmp_path, state):
    """Killed now and then after running a while (the failover benchmark's kills): restarted at once each
    time with a fresh count, where a crash loop's limit (1 here) would have given up at the second."""
    runs_a_while = DRIVER.replace("time.sleep(600)", "time.sleep(1.5); sys.exit(1)")
    launcher = Launcher(state, argv_builder=python_argv(runs_a_while))
    rec = launcher.ensure_started(spec(app_yaml(tmp_path, backoff_s=30, limit=1, window_s=600, stable_s=1)))
    wait_for(lambda: len(starts(rec)) == 3, timeout_s=20)
    assert all(json.loads(relaunch)["fresh"] for _, _, relaunch in starts(rec)[1:])
    assert launcher.stop("demo", "blue", grace_s=10).was_running


# A driver that, started as a spare (SPARE_ARG), says so and holds until the restarts file names it, as
# spark_apps.runtime.coordination.hold.SpareHold does; then it runs as the driver.
SPARE_AWARE = (
    "import json,os,signal,sys,time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); "
    "spare = '--spare-of' in sys.argv; f = sys.argv[-1]; "
    "print('SPARE' if spare else 'FIRST', os.getpid(), flush=True); "
    "exec('while spare:\\n try: raw = json.load(open(f))\\n except Exception: raw = {}\\n "
    'if raw.get("spare_pid") == os.getpid(): break\\n time.sleep(0.05)\'); '
    "print('DRIVING', os.getpid(), flush=True); time.sleep(600)"
)


def lines(rec, word: str) -> list[int]:
    return [int(ln.split()[1]) for ln in Path(rec.log_path).read_text().splitlines() if ln.startswith(word + " ")]


def test_a_spare_driver_replaces_a_dead_one_at_once_and_another_spare_follows(tmp_path, state):
    launcher = Launcher(state, argv_builder=python_argv(SPARE_AWARE))
    rec = launcher.ensure_started(spec(app_yaml(tmp_path, stable_s=1, spare=True)))  # a spare 0.5 s after a start
    wait_for(lambda: len(lines(rec, "SPARE")) == 1, timeout_s=20)
    first, spare = lines(rec, "FIRST")[0], lines(rec, "SPARE")[0]
    assert lines(rec, "DRIVING") == [first]  # the spare holds
    os.killpg(first, signal.SIGKILL)
    wait_for(lambda: lines(rec, "DRIVING") == [first, spare], timeout_s=10)  # the spare took its place
    said = launcher.relaunch(rec)
    assert said is not None and said.state == "relaunched" and said.code == -signal.SIGKILL
    assert json.loads(restarts_file_of(rec).read_text())["spare_pid"] == spare == said.driver_pid
    assert "spare driver" in Path(rec.log_path).read_text() and "replaces it" in Path(rec.log_path).read_text()
    wait_for(lambda: len(lines(rec, "SPARE")) == 2, timeout_s=20)  # and a new spare beside it
    assert launcher.find("demo", "blue") == rec
    result = launcher.stop("demo", "blue", grace_s=10)  # the driver and its spare end
    assert result.graceful and launch_processes(rec.launch_id) == []


def test_restart_policy_backs_off_then_gives_up():
    policy = RestartPolicy(limit=3, window_s=100, backoff_s=10, backoff_max_s=15)
    assert policy.decide([], 1000) == (0.0, "restart 1 of 3")
    assert policy.decide([995], 1000) == (5.0, "restart 2 of 3")  # 10 s after the last one
    assert policy.decide([950, 990], 1000) == (5.0, "restart 3 of 3")  # 20 s, capped at 15
    assert policy.decide([950, 960, 990], 1000) == (None, "crash loop: 3 restarts in 100 s (limit 3)")
    assert policy.decide([850, 860, 990], 1000)[0] == 0.0  # two fell out of the window
    assert RestartPolicy().decide([], 0)[0] is None  # limit 0: never
    assert describe_exit(-9) == "was killed by SIGKILL" and describe_exit(1) == "exited with code 1"
