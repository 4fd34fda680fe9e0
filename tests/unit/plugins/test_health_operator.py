"""The crash-loop reason names why the last launch died, even when the status was read before the
driver published its error and exited (a race seen in the e2e test), and when it died silently."""

from types import SimpleNamespace

from baton.health import SlotHealth, Verdict
from baton.records import Role, Slot, SlotSpec, SlotState, StatusRecord
from baton_airflow.operators.health import HealthCheckOperator

APP = SimpleNamespace(name="crashy")
SPEC = SlotSpec(desired=SlotState.STARTING, version="v1", started_ms=1_000)


def status(state, ts_ms, error=""):
    return StatusRecord(app="crashy", slot=Slot.BLUE, state=state, role=Role.STANDBY, epoch_seen=0,
                        ts_ms=ts_ms, error=error)


class Control:
    def __init__(self, records):
        self.records = records

    def status(self, app, slot=None, last_n=5000):
        return [r for r in self.records if r.app == app and (slot is None or r.slot is slot)]


class Spark:
    def __init__(self, launch=None, exit_code=None):
        self.launch, self.exit_code = launch, exit_code

    def launcher(self):
        spark = self
        return SimpleNamespace(read_record=lambda app, slot: spark.launch,
                               exit_info=lambda rec: SimpleNamespace(code=spark.exit_code))


def last_error(health, control, spark):
    return HealthCheckOperator.last_error(APP, Slot.BLUE, SPEC, health, control, spark)


def test_the_error_of_the_record_assessed():
    health = SlotHealth("crashy", Slot.BLUE, Verdict.DEAD, last=status(SlotState.FAILED, 2_000, "boom"))
    assert last_error(health, Control([]), Spark()) == "boom"


def test_an_error_published_after_the_status_was_read_is_read_again():
    stale = SlotHealth("crashy", Slot.BLUE, Verdict.DEAD, last=status(SlotState.STARTING, 2_000))
    control = Control([status(SlotState.FAILED, 500, "an older launch's error"), status(SlotState.STARTING, 2_000),
                       status(SlotState.FAILED, 3_000, "RuntimeError: injected bug")])
    assert last_error(stale, control, Spark()) == "RuntimeError: injected bug"


def test_a_silent_death_is_described_by_exit_code_and_log(tmp_path):
    log = tmp_path / "driver.log"
    log.write_text("[baton] launch x\nTraceback (most recent call last):\nImportError: no module named nope\n"
                   "[baton] driver 7 exited with code 1\n")
    health = SlotHealth("crashy", Slot.BLUE, Verdict.DEAD, last=None)
    control = Control([status(SlotState.FAILED, 500, "an older launch's error")])
    reason = last_error(health, control, Spark(SimpleNamespace(log_path=str(log)), exit_code=1))
    assert reason.startswith("driver exited with code 1: ImportError: no module named nope")
    assert str(log) in reason
