"""A staged next launch (baton.launcher.stage, spark_apps.runtime.coordination.hold): spawned beside the running
launch, it holds until promoted, and is promoted by the ensure_started of the same launch once the
running one is gone; anything else (a stop, a different launch, no promotion in time) ends it. The
driver is a small Python process that holds with the real Hold, as the harness does."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from baton.launcher import STAGED_LOCK, STAGED_RECORD, Launcher, SlotBusy
from spark_apps.runtime.coordination.hold import Hold
from tests.unit.baton.test_launcher import launch_processes, python_argv, spec, wait_for

# Holds when staged (the real Hold), then says RUNNING with its launch id; ends cleanly on SIGTERM.
STAGEABLE = """
import os, signal, sys, threading
from pathlib import Path
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: stop.set())
args = sys.argv[1:]
me = os.environ['BATON_LAUNCH_ID']
if '--hold-until-recorded' in args:
    from spark_apps.runtime.coordination.hold import Hold
    print('HELD ' + me, flush=True)
    hold = Hold(Path(args[args.index('--hold-until-recorded') + 1]), float(args[args.index('--hold-timeout-s') + 1]))
    if not hold.wait(stop):
        sys.exit(0 if stop.is_set() else 3)
print('RUNNING ' + me, flush=True)
stop.wait(600)
"""


@pytest.fixture
def app_files(tmp_path):
    body = (
        "name: demo\nmodule: spark_apps.apps.click_counts\nversion: {v}\n"
        "input: {{topic: clicks, partitions: 2}}\noutput: {{topic: counts, partitions: 2}}\n"
    )
    paths = {}
    for v in ("v1", "v2", "v3"):  # the registry's layout of an app's versions
        paths[v] = tmp_path / "versions" / "demo" / f"{v}.yaml"
        paths[v].parent.mkdir(parents=True, exist_ok=True)
        paths[v].write_text(body.format(v=v))
    return paths


@pytest.fixture
def state(tmp_path):
    """A state dir whose launches, staged or not, are all killed at teardown."""
    root = tmp_path / "state"
    yield root
    for record in [*root.glob("slots/*/*/driver.json"), *root.glob(f"slots/*/*/{STAGED_RECORD}")]:
        for pid in launch_processes(json.loads(record.read_text())["launch_id"]):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def launcher(state):
    return Launcher(state, argv_builder=python_argv(STAGEABLE))


def log_of(launcher) -> str:
    return (launcher.slot_dir("demo", "blue") / "driver.log").read_text()


def test_a_staged_launch_holds_beside_the_running_one_and_is_promoted_once_it_is_gone(launcher, app_files):
    first = launcher.ensure_started(spec(app_files["v1"]))
    wait_for(lambda: f"RUNNING {first.launch_id}" in log_of(launcher))
    staged = launcher.stage(spec(app_files["v2"]))
    assert staged is not None and staged.pid and staged.version == "v2"
    assert launcher.stage(spec(app_files["v2"])) == staged  # a retried stage gets the same copy back
    wait_for(lambda: f"HELD {staged.launch_id}" in log_of(launcher))
    time.sleep(0.5)
    assert f"RUNNING {staged.launch_id}" not in log_of(launcher)  # it holds while the slot is another's
    assert launcher.find("demo", "blue") == first
    with pytest.raises(SlotBusy):  # the slot still runs v1: no second copy through ensure_started
        launcher.ensure_started(spec(app_files["v2"]))

    result = launcher.stop("demo", "blue", grace_s=10, keep_staged=True)
    assert result.graceful and launch_processes(first.launch_id) == []
    gone_at = time.time()
    promoted = launcher.ensure_started(spec(app_files["v2"]))
    assert (promoted.launch_id, promoted.pid) == (staged.launch_id, staged.pid)  # promoted, not spawned
    # Its statuses count from now: v1's last ones (until it was gone) are not the new launch's.
    assert promoted.launched_at >= gone_at > staged.launched_at
    wait_for(lambda: f"RUNNING {staged.launch_id}" in log_of(launcher))
    assert launcher.find("demo", "blue") == promoted
    assert not (launcher.slot_dir("demo", "blue") / STAGED_RECORD).exists()
    assert launcher.ensure_started(spec(app_files["v2"])) == promoted  # reattach as for any launch
    stopped = launcher.stop("demo", "blue", grace_s=10)  # the lock moved with it: a stop finds and ends it
    assert stopped.was_running and stopped.graceful and launch_processes(staged.launch_id) == []


def test_a_stop_or_another_launch_discards_the_staged_one(launcher, app_files):
    launcher.ensure_started(spec(app_files["v1"]))
    staged = launcher.stage(spec(app_files["v2"]))
    wait_for(lambda: f"HELD {staged.launch_id}" in log_of(launcher))
    other = launcher.stage(spec(app_files["v3"]))  # a different next launch replaces it
    assert other.launch_id != staged.launch_id and launch_processes(staged.launch_id) == []
    wait_for(lambda: f"HELD {other.launch_id}" in log_of(launcher))
    launcher.stop("demo", "blue", grace_s=10)  # a plain stop: the slot is not meant to run at all
    assert launch_processes(other.launch_id) == []
    assert not (launcher.slot_dir("demo", "blue") / STAGED_RECORD).exists()
    assert launcher.find("demo", "blue") is None


def test_a_start_of_another_launch_discards_the_staged_one_and_spawns(launcher, app_files):
    launcher.ensure_started(spec(app_files["v1"]))
    staged = launcher.stage(spec(app_files["v2"]))
    launcher.stop("demo", "blue", grace_s=10, keep_staged=True)
    back = launcher.ensure_started(spec(app_files["v1"]))  # e.g. an abort puts the old version back
    assert back.launch_id != staged.launch_id and back.version == "v1"
    assert launch_processes(staged.launch_id) == []
    wait_for(lambda: f"RUNNING {back.launch_id}" in log_of(launcher))


def test_nothing_is_staged_beside_a_slot_that_runs_nothing(launcher, app_files):
    assert launcher.stage(spec(app_files["v2"])) is None
    assert not launcher.discard_staged("demo", "blue")


def test_a_staged_launch_never_promoted_ends_by_itself(state, app_files):
    launcher = Launcher(state, argv_builder=python_argv(STAGEABLE))
    launcher.ensure_started(spec(app_files["v1"]))
    staged = launcher.stage(spec(app_files["v2"]), hold_timeout_s=1)
    wait_for(lambda: launch_processes(staged.launch_id) == [], timeout_s=15)
    exit_file = json.loads((launcher.slot_dir("demo", "blue") / "driver.exit.json").read_text())
    assert (exit_file["launch_id"], exit_file["code"]) == (staged.launch_id, 3)
    launcher.stop("demo", "blue", grace_s=10, keep_staged=True)
    fresh = launcher.ensure_started(spec(app_files["v2"]))  # the dead staged copy is forgotten, not promoted
    assert fresh.launch_id != staged.launch_id
    wait_for(lambda: f"RUNNING {fresh.launch_id}" in log_of(launcher))


def test_a_promotion_cut_short_after_the_lock_moved_is_completed(launcher, app_files):
    launcher.ensure_started(spec(app_files["v1"]))
    staged = launcher.stage(spec(app_files["v2"]))
    launcher.stop("demo", "blue", grace_s=10, keep_staged=True)
    slot_dir = launcher.slot_dir("demo", "blue")
    os.replace(slot_dir / STAGED_LOCK, slot_dir / "driver.lock")  # the launcher died right after this
    again = launcher.ensure_started(spec(app_files["v2"]))
    assert (again.launch_id, again.pid) == (staged.launch_id, staged.pid)
    wait_for(lambda: f"RUNNING {staged.launch_id}" in log_of(launcher))
    assert psutil.pid_exists(staged.pid)


def test_hold_waits_for_its_own_launch_and_gives_up_on_a_stop_or_the_timeout(tmp_path):
    record = tmp_path / "driver.json"
    hold = Hold(record, timeout_s=5)
    record.write_text(json.dumps({"launch_id": "old"}))
    stop = threading.Event()
    threading.Timer(0.3, lambda: record.write_text(json.dumps({"launch_id": "mine"}))).start()
    started = time.monotonic()
    assert hold.wait(stop, launch_id="mine")
    assert 0.25 < time.monotonic() - started < 3
    assert not Hold(record, timeout_s=0.3).wait(stop, launch_id="someone else")  # the timeout
    stop.set()
    assert not hold.wait(stop, launch_id="never")  # a stop: at once
    record.write_text("{not json")  # mid-write: not yet, no error
    assert not Hold(record, timeout_s=0.2).wait(threading.Event(), launch_id="mine")
    with pytest.raises(RuntimeError, match="BATON_LAUNCH_ID"):
        Hold(Path(record), 1).wait(threading.Event(), launch_id="")
