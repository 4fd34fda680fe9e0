"""A slot's driver restarted by its wrapper (baton.driver_wrapper), both slots launched as the platform
launches them (baton.launcher, with their spare drivers, as an app has by default), the real click-count
app under live load, nothing in the test writing the control record or starting a process: kill -9 of
the active driver's process group (the driver, its JVM and Python workers: a crash). The standby takes
over by itself; the wrapper hands the dead driver's place to its spare at once, under the same launch,
the restart is recorded by the supervisor in the control record (the crash-loop guard's count), and the
slot comes back as the standby, then gets a new spare. The independent verifier reads the output:
0 lost, 0 duplicated, 0 wrong."""

import json
import os
import signal
import time

import pytest

from baton.handoff import FAILOVER
from baton.kafka.control_log import read_control
from baton.launcher import Launcher, LaunchSpec, restarts_file_of
from baton.records import Role, Slot
from spark_apps.runtime.coordination.relaunch import RESTARTED_BY_SUPERVISOR
from tests.integration.spark_apps.runtime.conftest import app_with_slots
from tests.integration.spark_apps.runtime.test_cutover import Load
from tests.integration.spark_apps.runtime.test_failover import finish_and_verify, one_writer_at_a_time, took_over
from tests.support.slots import read_status, wait_for, wait_until_emitted, wait_until_following

pytestmark = pytest.mark.integration


@pytest.fixture
def spare_pair(bootstrap, tmp_path):
    yield from app_with_slots(bootstrap, tmp_path, Slot, spare_driver=True)


def spare_ready(launcher, app, slot) -> bool:
    """The slot's log says a spare driver has Spark up and holds (spark_apps.runtime.harness)."""
    return "spare driver ready" in (launcher.slot_dir(app.name, slot) / "driver.log").read_text()


@pytest.fixture
def launched_pair(bootstrap, spare_pair, tmp_path):
    app, path = spare_pair
    launcher = Launcher(tmp_path / "state")
    launches = {
        slot: launcher.ensure_started(LaunchSpec(app=str(path), slot=slot, bootstrap=bootstrap)) for slot in Slot
    }
    load = Load(bootstrap, app.input.topic)
    try:
        load.start()
        wait_until_emitted(bootstrap, app, 3000, timeout_s=240)
        wait_until_following(bootstrap, app, "green", timeout_s=180)
        wait_for("blue's spare driver", lambda: spare_ready(launcher, app, Slot.BLUE), 180)
        yield app, launcher, launches, load
    finally:
        load.done.set()
        for slot in Slot:
            launcher.stop(app.name, slot, grace_s=30)


def test_a_killed_active_is_restarted_in_place_and_back_as_the_standby(bootstrap, launched_pair):
    app, launcher, launches, load = launched_pair
    driver = read_status(bootstrap, app.name, "blue")[-1].pid
    assert os.getpgid(driver) == driver  # a process group of its own, apart from its wrapper
    killed_ms = int(time.time() * 1000)
    os.killpg(driver, signal.SIGKILL)

    rec = wait_for("green to take over", lambda: took_over(bootstrap, app), 60)
    # Green's takeover; the record read may already be the one after it, blue's restart's record.
    assert rec.active is Slot.GREEN and rec.writer in ("green (lease)", "blue (supervisor)"), rec
    assert rec.handoff.id == FAILOVER, rec
    relaunch = wait_for("the wrapper to restart blue", lambda: launcher.relaunch(launches[Slot.BLUE]), 30)
    assert relaunch.state == "relaunched" and relaunch.code == -signal.SIGKILL
    spare = json.loads(restarts_file_of(launches[Slot.BLUE]).read_text()).get("spare_pid")
    assert spare is not None  # its spare took the dead driver's place
    restart_begun_s = relaunch.at - killed_ms / 1000
    assert restart_begun_s < 2.0, restart_begun_s
    assert launcher.find(app.name, Slot.BLUE) == launches[Slot.BLUE]  # the same launch, never without its lock

    spec = wait_for(
        "the restart recorded in the control record",
        lambda: (s := read_control(bootstrap, app.name).slots[Slot.BLUE]).restarts and s,
        120,
    )
    assert spec.reason.startswith(RESTARTED_BY_SUPERVISOR) and "killed by SIGKILL" in spec.reason
    back = wait_for(
        "blue back as the standby",
        lambda: next(
            (
                s
                for s in read_status(bootstrap, app.name, "blue")
                if s.ts_ms > killed_ms and s.pid != driver and s.batch_id >= 0 and s.role is Role.STANDBY
            ),
            None,
        ),
        240,
    )
    print(
        f"restart begun {restart_begun_s:.2f} s, first standby batch {back.ts_ms / 1000 - killed_ms / 1000:.1f} s after the kill"
    )
    one_writer_at_a_time(finish_and_verify(bootstrap, app, load))
    assert read_control(bootstrap, app.name).epoch == 2  # blue did not take the role back


def test_a_second_fault_while_the_first_is_repaired_is_exactly_once(bootstrap, launched_pair):
    """The active dies; 3 s after the standby took over, the new active dies too, while the first is
    still coming back (its spare promoted, not yet running): no standby can take over, so each wrapper
    brings its own back, and the output goes on exactly once from where it stopped."""
    app, launcher, launches, load = launched_pair
    first = read_status(bootstrap, app.name, "blue")[-1].pid
    os.killpg(first, signal.SIGKILL)
    wait_for("green to take over", lambda: took_over(bootstrap, app), 60)
    time.sleep(3)
    second = read_status(bootstrap, app.name, "green")[-1].pid
    killed_ms = int(time.time() * 1000)
    os.killpg(second, signal.SIGKILL)
    for slot, dead in ((Slot.BLUE, first), (Slot.GREEN, second)):
        wait_for(
            f"{slot.value} back, running",
            lambda slot=slot, dead=dead: any(
                s.pid != dead and s.batch_id >= 0 and s.ts_ms > killed_ms
                for s in read_status(bootstrap, app.name, slot.value)
            ),
            240,
        )
        assert launcher.find(app.name, slot) == launches[slot]  # restarted in place, each by its wrapper
    one_writer_at_a_time_or_more(finish_and_verify(bootstrap, app, load))


def one_writer_at_a_time_or_more(marks) -> None:
    """Markers never go back to an older epoch: at every moment one writer."""
    epochs = [m.epoch for m in marks]
    assert epochs == sorted(epochs), "markers of an older epoch after a newer one: two writers"
