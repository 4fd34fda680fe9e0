"""Deaths the standby's lease watch must not, or cannot, repair, under live load through Airflow:

- kill -9 of the standby's whole launch, its wrapper with it (a supervisor gone too): no failover (the
  active keeps the role and its epoch); baton_watch sees the death and has baton_health, the supervisor of
  last resort, start a new launch at once (nothing in the test triggers it), which comes back from its
  checkpoint as the standby and, once it runs, is desired RUNNING again;
- kill -9 of both slots' drivers: nobody can take over; each wrapper starts its driver again in place
  (baton.driver_wrapper), the active from its checkpoint, and output resumes where it stopped.
The output is checked by the independent verifier: 0 lost, 0 duplicated, 0 wrong.
(kill -9 of the active with Airflow stopped: tests/e2e/test_lifecycle_and_health.py.)
"""

import os
import signal
import time

import pytest

from baton.kafka.control_log import read_control
from baton.launcher import Launcher
from baton.records import Slot, SlotState
from baton.tools.verify import read_output, verify
from spark_apps.runtime.coordination.relaunch import RESTARTED_BY_SUPERVISOR
from tests.support.e2e import LiveLoad, both_slots_running, desired, run_dag
from tests.support.slots import read_status, wait_for, wait_until_emitted

pytestmark = pytest.mark.e2e


def kill_driver(bootstrap, app, slot: Slot) -> None:
    os.kill(read_status(bootstrap, app.name, slot.value)[-1].pid, signal.SIGKILL)


def kill_launch(launcher: Launcher, bootstrap, app, slot: Slot) -> None:
    """kill -9 of the slot's wrapper, then of its driver: nothing of the launch is left to restart it."""
    os.kill(launcher.find(app.name, slot).pid, signal.SIGKILL)
    kill_driver(bootstrap, app, slot)


def restarted_and_running(client, platform, app, slot: Slot, restarts: int) -> bool:
    """One baton_health run, then: `slot` was restarted `restarts` times and is desired RUNNING again."""
    assert run_dag(client, "baton_health")["state"] == "success"
    spec = desired(platform, app.name, slot)
    return len(spec.restarts) >= restarts and spec.desired is SlotState.RUNNING


def watch_reports(client, app, slot: Slot) -> set[str]:
    """What baton_watch's runs reported of `slot` ("died", "up"), counting only runs whose baton_health
    run (the one each triggers, baton_watch__<its run id>) succeeded."""
    from baton.airflow_api import AirflowAPIError

    runs = client.request(
        "GET", "/dags/baton_watch/dagRuns", "baton_watch runs", params={"limit": 50, "order_by": "-start_date"}
    )["dag_runs"]
    kinds = set()
    for run in runs:
        try:
            changes = client.xcom("baton_watch", run["dag_run_id"], "watch") or []
            checked = client.dag_run("baton_health", f"baton_watch__{run['dag_run_id']}")["state"] == "success"
        except AirflowAPIError:  # still watching, or skipped (nothing changed): no XCom, no check
            continue
        if checked:
            kinds |= {c["kind"] for c in changes if c["app"] == app.name and c["slot"] == slot.value}
    return kinds


def test_a_dead_standby_is_restarted_and_dead_slots_come_back_exactly_once(stack):
    platform, client, apps = stack
    app, bootstrap = apps["cc_fail"], platform.settings.kafka_bootstrap
    launcher = Launcher(platform.settings.state_dir)
    with both_slots_running(client, app):
        with LiveLoad(bootstrap, app.input.topic, per_tick=250) as load:
            wait_until_emitted(bootstrap, app, 5000, timeout_s=240)
            wait_for(
                "green running as the standby",
                lambda: any(s.batch_id >= 0 for s in read_status(bootstrap, app.name, "green")),
                180,
                every_s=1,
            )

            # 1. The standby dies with its wrapper: the active keeps the role; baton_health restarts the standby.
            first_green = launcher.find(app.name, Slot.GREEN)
            kill_launch(launcher, bootstrap, app, Slot.GREEN)
            time.sleep(3 * app.lease_ttl_ms / 1000)
            assert (read_control(bootstrap, app.name).epoch, read_control(bootstrap, app.name).active) == (1, Slot.BLUE)
            wait_for(
                "baton_watch to report green's death and return, each checked by baton_health",
                lambda: watch_reports(client, app, Slot.GREEN) >= {"died", "up"},
                240,
                every_s=2,
            )
            # The return's check may come before the check can count green as up (seen once in CI: it left
            # green STARTING); the scheduled run then makes it RUNNING.
            wait_for(
                "green desired RUNNING again",
                lambda: desired(platform, app.name, Slot.GREEN).desired is SlotState.RUNNING,
                150,
                every_s=2,
            )
            assert len(desired(platform, app.name, Slot.GREEN).restarts) == 1
            second_green = launcher.find(app.name, Slot.GREEN)
            assert second_green is not None and second_green.launch_id != first_green.launch_id  # a new launch

            # 2. Both drivers die: each wrapper restarts its own in place; blue is still the active, resumes
            # from its checkpoint.
            time.sleep(5)
            blue_launch = launcher.find(app.name, Slot.BLUE)
            kill_driver(bootstrap, app, Slot.BLUE)
            kill_driver(bootstrap, app, Slot.GREEN)
            wait_for(
                "both restarted in place and running",
                lambda: (
                    restarted_and_running(client, platform, app, Slot.BLUE, 1)
                    and desired(platform, app.name, Slot.GREEN).desired is SlotState.RUNNING
                    and len(desired(platform, app.name, Slot.GREEN).restarts) >= 2
                ),
                600,
                every_s=1,
            )
            for slot, launch in ((Slot.BLUE, blue_launch), (Slot.GREEN, second_green)):
                assert launcher.find(app.name, slot).launch_id == launch.launch_id, slot  # the same launches
                assert desired(platform, app.name, slot).reason.startswith(RESTARTED_BY_SUPERVISOR), slot
            time.sleep(5)
        # The load has stopped; the slots still run until the output holds every event (stopping them
        # first raced their catch-up after the restart: seen in CI on a slow host).
        # Green may have taken over from the restarted blue (its restore took longer than green's), or not:
        # either way one slot is active, and the output is exactly once.
        wait_until_emitted(bootstrap, app, load.sent, timeout_s=300)
    verdict = verify(load.truth, read_output(bootstrap, app.output.topic, app.output.partitions))
    assert verdict.ok, verdict.summary()
