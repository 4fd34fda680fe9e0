"""What a driver its wrapper restarted does first (spark_apps.runtime.coordination.relaunch): it records
the restart in the slot's spec, the crash-loop guard's count, or ends when the slot is no longer wanted."""

import json
import time

from baton.control_plane import ControlPlane
from baton.driver_wrapper import LAUNCH_ID_ENV, RELAUNCH_ENV
from baton.health_policy import HealthPolicy
from baton.records import ControlRecord, Slot, SlotSpec, SlotState
from spark_apps.runtime.coordination.lease import lease_launch
from spark_apps.runtime.coordination.relaunch import Relaunch, record_restart, wanted_running
from tests.support.fakes import MemoryControlStore

RELAUNCH = Relaunch(restart=2, code=-9, at_ms=1_000_000)


def record(desired=SlotState.RUNNING, restarts=()) -> ControlRecord:
    return ControlRecord(
        app="app",
        revision=1,
        epoch=1,
        active=Slot.BLUE,
        slots={Slot.BLUE: SlotSpec(desired=desired, restarts=restarts), Slot.GREEN: SlotSpec(desired=desired)},
    )


def test_the_relaunch_record_comes_from_the_wrapper_s_environment():
    env = {RELAUNCH_ENV: json.dumps({"restart": 2, "code": -9, "at": 1000.0}), LAUNCH_ID_ENV: "abc"}
    assert Relaunch.from_env(env) == RELAUNCH
    assert Relaunch.from_env({}) is None and Relaunch.from_env({RELAUNCH_ENV: "{bad"}) is None
    assert (
        RELAUNCH.reason() == "restarted by its supervisor (restart 2 of this launch): the driver was killed by SIGKILL"
    )
    # Each driver process renews its lease as a launch of its own.
    assert lease_launch(env) == "abc.2" and lease_launch({LAUNCH_ID_ENV: "abc"}) == "abc"


def test_a_slot_no_longer_wanted_running_is_not_restarted():
    assert wanted_running(record(), Slot.BLUE) == ""
    assert wanted_running(record(SlotState.STARTING), Slot.BLUE) == ""
    assert "wants it stopped" in wanted_running(record(SlotState.STOPPED), Slot.BLUE)
    assert "wants it failed" in wanted_running(record(SlotState.FAILED), Slot.BLUE)
    assert "no such slot" in wanted_running(None, Slot.BLUE)


def test_the_restart_is_counted_in_the_slot_s_spec_by_the_supervisor():
    store = MemoryControlStore()
    plane = ControlPlane(store, writer="blue (supervisor)")
    earlier = int(time.time() * 1000) - 60_000  # inside the window; one 20 minutes ago is not
    plane.update("app", lambda _: record(restarts=(earlier - 1_140_000, earlier)))
    current = plane.current("app")
    written = record_restart(plane, "app", Slot.BLUE, current, RELAUNCH, HealthPolicy())
    spec = written.slots[Slot.BLUE]
    assert spec.restarts == (earlier, 1_000_000) and spec.desired is SlotState.RUNNING
    assert spec.reason.startswith("restarted by its supervisor") and written.writer == "blue (supervisor)"
    # After a driver that had run well, the count begins again (baton.driver_wrapper's stable_s).
    fresh = record_restart(
        plane, "app", Slot.BLUE, written, Relaunch(1, -9, 2_000_000, fresh=True), HealthPolicy()
    ).slots[Slot.BLUE]
    assert fresh.restarts == (2_000_000,)
    # A record moved since it was read (a handoff's step) is not overwritten: the count is one short.
    assert record_restart(plane, "app", Slot.BLUE, current, RELAUNCH, HealthPolicy()) is None
