"""The way back of a rolling upgrade refused before the cutover: the upgraded standby is put back on the
old version from a copy of the checkpoint it left (the new version's first batch may have failed on it)."""

import time
from types import SimpleNamespace

from baton.apps import load_app
from baton.control_plane import ControlPlane
from baton.plans import UpgradePlan
from baton.records import Role, Slot, SlotState, StatusRecord
from baton_airflow.hooks.slot_state import WAY_BACK, BatonSlotStateHook
from baton_airflow.operators.upgrade import AbortUpgradeOperator
from tests.support.fakes import MemoryControlStore

APP = load_app("click_counts")
PLAN = UpgradePlan(
    app=APP.name,
    version="v2",
    definition="v2.yaml",
    active=Slot.BLUE,
    standby=Slot.GREEN,
    epoch=1,
    from_version="v1",
    policy="exact",
)


keep_way_back, take_way_back = BatonSlotStateHook.keep_way_back, BatonSlotStateHook.take_way_back


def test_the_way_back_is_a_copy_of_the_stopped_checkpoint_put_back_in_its_place(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "commits").mkdir(parents=True)
    (checkpoint / "commits" / "7").write_text("v1 left this")
    assert keep_way_back(tmp_path / "missing") is None
    copy = keep_way_back(checkpoint)
    assert copy == tmp_path / WAY_BACK and (copy / "commits" / "7").read_text() == "v1 left this"
    (checkpoint / "commits" / "8").write_text("the new version's batch")
    assert take_way_back(checkpoint)
    assert sorted(p.name for p in (checkpoint / "commits").iterdir()) == ["7"] and not copy.exists()
    assert not take_way_back(checkpoint)  # a retry: done already
    keep_way_back(checkpoint)
    BatonSlotStateHook.drop_way_back(checkpoint)
    assert not (tmp_path / WAY_BACK).exists() and (checkpoint / "commits" / "7").exists()


class Control:
    bootstrap = "unused:1"

    def __init__(self):
        self._plane = ControlPlane(MemoryControlStore(), writer="test")

    def plane(self):
        return self._plane

    def status(self, app, slot=None, last_n=5000):
        return [
            StatusRecord(
                app=app,
                slot=Slot.GREEN,
                state=SlotState.RUNNING,
                role=Role.STANDBY,
                epoch_seen=1,
                batch_id=8,
                ts_ms=int(time.time() * 1000) + 1_000,
            )
        ]  # after any launch


class Spark:
    def __init__(self, state_dir):
        self.state_dir, self.calls = state_dir, []

    def stop(self, app, slot, grace_s=0, self_stop_s=0):
        self.calls.append(("stop", slot))

    def ensure_started(self, definition, slot, bootstrap, generation=0):
        self.calls.append(("start", slot, definition))
        return SimpleNamespace(launched_at=time.time(), pid=1)


def test_an_upgraded_standby_is_put_back_on_the_old_version_from_the_state_it_left(tmp_path, monkeypatch):
    control, spark = Control(), Spark(tmp_path)
    checkpoint = tmp_path / "green" / "checkpoint"
    monkeypatch.setattr(BatonSlotStateHook, "checkpoint", lambda self, app, slot, generation: checkpoint)
    (checkpoint / "commits").mkdir(parents=True)
    keep_way_back(checkpoint)
    plane = control.plane()
    plane.move_slot(APP.name, Slot.GREEN, SlotState.STARTING, version="v2")  # the upgrade started v2 on it
    op = AbortUpgradeOperator(task_id="abort", app=APP.name, steps=["warm_up"], plan=PLAN.to_xcom())
    spec = plane.current(APP.name).slots[Slot.GREEN]
    said = op.put_back(control, spark, APP, PLAN, Slot.GREEN, spec, "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE")
    assert "back on v1" in said
    assert [c[0] for c in spark.calls] == ["stop", "start"] and spark.calls[1][2].endswith("click_counts.yaml")
    back = plane.current(APP.name).slots[Slot.GREEN]
    assert (back.version, back.desired) == ("v1", SlotState.RUNNING)
    assert not (checkpoint.parent / WAY_BACK).exists()


def test_without_a_copy_the_run_says_how_to_put_the_standby_back(tmp_path, monkeypatch):
    control, spark = Control(), Spark(tmp_path)
    monkeypatch.setattr(BatonSlotStateHook, "checkpoint", lambda self, app, slot, generation: tmp_path / "checkpoint")
    op = AbortUpgradeOperator(task_id="abort", app=APP.name, steps=["warm_up"], plan=PLAN.to_xcom())
    said = op.put_back(control, spark, APP, PLAN, Slot.GREEN, SimpleNamespace(generation=0), "warm-up timed out")
    assert "run the upgrade with version v1" in said and spark.calls == []
