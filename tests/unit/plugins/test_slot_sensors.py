"""The slot sensors on the sensor API: deferred by default; with deferrable=False each poke runs the
same check the trigger runs (met, not yet, failed with its reason), one check across pokes; the
wait's limit is wait_timeout_s, else the sensor's own timeout."""

from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException

from baton.conditions import Check
from baton_airflow.sensors import slot as sensors
from baton_airflow.sensors.slot import SlotHealthySensor


class Ti:
    def __init__(self):
        self.pushed = {}

    def xcom_push(self, key, value):
        self.pushed[key] = value


@pytest.fixture
def checks(monkeypatch):
    """The check's answers, one per poke; records each trigger built."""
    answers, built = [], []

    class FakeTrigger:
        def __init__(self, **kwargs):
            built.append(kwargs)

        def check(self):
            return answers.pop(0)

    monkeypatch.setattr(SlotHealthySensor, "trigger_class", FakeTrigger)
    monkeypatch.setattr(sensors, "load_app", lambda name: SimpleNamespace(name=name))
    monkeypatch.setattr(sensors.BatonKafkaHook, "bootstrap", property(lambda self: "b:9092"))
    return answers, built


def test_pokes_wait_until_met_with_one_check_across_them(checks):
    answers, built = checks
    answers += [Check(message="lag 5000 > 1000"), Check(met=True, message="healthy")]
    sensor = SlotHealthySensor(task_id="t", app="cc", slot="green", deferrable=False, mode="reschedule")
    context = {"ti": Ti()}
    assert sensor.poke(context) is False
    assert sensor.poke(context) is True
    assert len(built) == 1 and built[0]["timeout_s"] == 600.0 and built[0]["slot"] == "green"


def test_a_failed_check_fails_the_poke_with_its_reason_for_the_next_step(checks):
    answers, _ = checks
    answers.append(Check(failed=True, message="green is dead"))
    ti = Ti()
    with pytest.raises(AirflowFailException, match="green is dead"):
        SlotHealthySensor(task_id="t", app="cc", slot="green", deferrable=False).poke({"ti": ti})
    assert ti.pushed == {"reason": "green is dead"}


def test_the_waits_limit_is_wait_timeout_s_else_the_sensor_timeout():
    assert SlotHealthySensor(task_id="a", app="cc", slot="blue").wait_s() == 600.0
    assert SlotHealthySensor(task_id="b", app="cc", slot="blue", wait_timeout_s=None, timeout=90).wait_s() == 90.0
    assert SlotHealthySensor(task_id="c", app="cc", slot="blue", wait_timeout_s="45", timeout=90).wait_s() == 45.0


def test_a_warm_up_waits_on_the_slot_the_restart_step_started_and_only_on_that_launch(monkeypatch, checks):
    """The DAGs give the warm-up the restart step's XCom (a SlotRestart), not Jinja lookups into it."""
    from baton_airflow.sensors.slot import LagWithinSensor

    _, built = checks
    monkeypatch.setattr(LagWithinSensor, "trigger_class", built_by(built))
    monkeypatch.setattr(sensors, "load_app", lambda name: SimpleNamespace(name=name, max_lag_records=50_000))
    sensor = LagWithinSensor(
        task_id="warm_up",
        app="cc",
        deferrable=False,
        restart={"slot": "green", "since_ms": 1234, "launch": {"pid": 9}, "version": "v2"},
    )
    sensor.execute({"ti": Ti()})
    assert (built[0]["slot"], built[0]["since_ms"], built[0]["max_lag"]) == ("green", 1234, 50_000)


def built_by(built):
    class FakeTrigger:
        def __init__(self, **kwargs):
            built.append(kwargs)

        def check(self):
            return Check(met=True, message="within")

    return FakeTrigger


def test_the_settle_follows_the_old_version_s_pace_and_lag_unless_a_batch_limit_is_given(monkeypatch, checks):
    """A host too busy for both versions alike: the old active's batches took ~9 s and it stood ~300k
    records behind after them; the settle's limits are the budgets beyond that, read from its status."""
    import dataclasses

    from baton.plans import Cutover
    from baton.records import Role, Slot, SlotState, StatusRecord
    from baton_airflow.hooks import control
    from baton_airflow.sensors.slot import SettleSensor

    _, built = checks
    monkeypatch.setattr(SettleSensor, "trigger_class", built_by(built))
    monkeypatch.setattr(
        sensors, "load_app", lambda name: SimpleNamespace(name=name, max_lag_records=200_000, batch_ms_budget=2_000)
    )
    base = StatusRecord(app="cc", slot=Slot.BLUE, state=SlotState.RUNNING, role=Role.ACTIVE, epoch_seen=1)
    old = [
        dataclasses.replace(
            base,
            batch_id=i,
            processed={0: 20_000 * (i + 1)},
            input_end={0: 20_000 * i + 300_000},
            input_rows=20_000,
            batch_ms=9_000,
            ts_ms=1_000 + i * 9_000,
        )
        for i in range(12)
    ]
    asked = []
    monkeypatch.setattr(control, "read_slot_status", lambda bootstrap, app, slot: asked.append(slot) or old)
    cutover = Cutover(epoch=2, active=Slot.GREEN, fence={0: 240_000}, at_ms=200_000).to_xcom()
    SettleSensor(task_id="settle", app="cc", cutover=cutover, deferrable=False).execute({"ti": Ti()})
    assert asked == ["blue"]
    assert (built[0]["slot"], built[0]["max_batch_ms"], built[0]["max_lag"]) == ("green", 9_000, 200_000 + 300_000)
    assert built[0]["record_cost_us"] == 450  # 9 s for 20k records: a larger batch as cheap is excused
    SettleSensor(task_id="settle2", app="cc", cutover=cutover, max_batch_ms=3_000, deferrable=False).execute(
        {"ti": Ti()}
    )
    assert (built[1]["max_batch_ms"], built[1]["max_lag"]) == (3_000, 500_000)
    assert built[1]["record_cost_us"] is None  # a limit asked for is taken as given
