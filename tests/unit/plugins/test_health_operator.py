"""The crash-loop reason names why the last launch died, even when the status was read before the
driver published its error and exited (a race seen in the e2e test), and when it died silently."""

import dataclasses
from pathlib import Path
from types import SimpleNamespace

from baton.apps import load_definition
from baton.health import SlotHealth, Verdict
from baton.records import Role, Slot, SlotSpec, SlotState, StatusRecord
from baton_airflow.operators.health import HealthCheckOperator

APP = SimpleNamespace(name="crashy")
SPEC = SlotSpec(desired=SlotState.STARTING, version="v1", started_ms=1_000)


def status(state, ts_ms, error=""):
    return StatusRecord(
        app="crashy", slot=Slot.BLUE, state=state, role=Role.STANDBY, epoch_seen=0, ts_ms=ts_ms, error=error
    )


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
        return SimpleNamespace(
            read_record=lambda app, slot: spark.launch, exit_info=lambda rec: SimpleNamespace(code=spark.exit_code)
        )


def last_error(health, control, spark):
    return HealthCheckOperator.last_error(APP, Slot.BLUE, SPEC, health, control, spark)


def test_the_error_of_the_record_assessed():
    health = SlotHealth("crashy", Slot.BLUE, Verdict.DEAD, last=status(SlotState.FAILED, 2_000, "boom"))
    assert last_error(health, Control([]), Spark()) == "boom"


def test_an_error_published_after_the_status_was_read_is_read_again():
    stale = SlotHealth("crashy", Slot.BLUE, Verdict.DEAD, last=status(SlotState.STARTING, 2_000))
    control = Control(
        [
            status(SlotState.FAILED, 500, "an older launch's error"),
            status(SlotState.STARTING, 2_000),
            status(SlotState.FAILED, 3_000, "RuntimeError: injected bug"),
        ]
    )
    assert last_error(stale, control, Spark()) == "RuntimeError: injected bug"


def test_a_silent_death_is_described_by_exit_code_and_log(tmp_path):
    log = tmp_path / "driver.log"
    log.write_text(
        "[baton] launch x\nTraceback (most recent call last):\nImportError: no module named nope\n"
        "[baton] driver 7 exited with code 1\n"
    )
    health = SlotHealth("crashy", Slot.BLUE, Verdict.DEAD, last=None)
    control = Control([status(SlotState.FAILED, 500, "an older launch's error")])
    reason = last_error(health, control, Spark(SimpleNamespace(log_path=str(log)), exit_code=1))
    assert reason.startswith("driver exited with code 1: ImportError: no module named nope")
    assert str(log) in reason


class FailoverControl(Control):
    """A control hook over the in-memory control store, with the dead active's last marker."""

    def __init__(self, records, marker):
        super().__init__(records)
        from baton.control_plane import ControlPlane
        from tests.support.fakes import MemoryControlStore

        self._plane, self.marker = ControlPlane(MemoryControlStore()), marker

    def plane(self):
        return self._plane

    def last_commit(self, app):
        return self.marker


def running_app():
    from baton.records import CommitMarker

    control = FailoverControl(
        [], CommitMarker(app="crashy", generation=0, epoch=1, slot=Slot.BLUE, batch_id=9, emitted={0: 40, 1: 50})
    )
    for slot in Slot:
        control.plane().move_slot("crashy", slot, SlotState.STARTING)
        control.plane().move_slot("crashy", slot, SlotState.RUNNING)
    return control


def fail_over_with_green_at(processed):
    """Blue (emitted {0: 40, 1: 50}) is dead, green's last batch ended at `processed`: the health
    operator's failover. (control, message, slots stopped)"""
    control = running_app()
    control.records = [
        StatusRecord(
            app="crashy",
            slot=Slot.GREEN,
            state=SlotState.RUNNING,
            role=Role.STANDBY,
            epoch_seen=1,
            batch_id=4,
            processed=processed,
            ts_ms=5,
        )
    ]
    stopped = []
    spark = SimpleNamespace(stop=lambda app, slot, grace_s: stopped.append(slot))
    app = SimpleNamespace(name="crashy", input=SimpleNamespace(partitions=2))
    message = HealthCheckOperator(task_id="check").fail_over(
        app, Slot.BLUE, control.plane().current("crashy"), control, spark
    )
    return control, message, stopped


def test_failover_fences_at_what_the_dead_active_emitted_and_hands_over():
    control, message, stopped = fail_over_with_green_at({0: 40, 1: 50})
    rec = control.plane().current("crashy")
    assert (rec.active, rec.epoch, rec.fence) == (Slot.GREEN, 2, None)
    assert stopped == [Slot.BLUE] and "failed over to green" in message
    fences = [r.fence for r in control.plane().store.log if r.fence]
    assert fences and all(f == {0: 40, 1: 50} for f in fences)  # fenced (and cut over) at exactly that


def test_a_failover_the_standby_made_first_is_left_as_it_is():
    from baton.handoff import take_over

    control = running_app()
    took = control.plane().update("crashy", take_over(Slot.GREEN, 1, {0: 40, 1: 50}, "lease expired", 7))
    spark = SimpleNamespace(stop=lambda app, slot, grace_s: None)
    app = SimpleNamespace(name="crashy", input=SimpleNamespace(partitions=2))
    # The health DAG decided on the record of epoch 1 before green's own takeover landed.
    stale = dataclasses.replace(took, epoch=1, active=Slot.BLUE, handoff=None)
    message = HealthCheckOperator(task_id="check").fail_over(app, Slot.BLUE, stale, control, spark, "dead")
    assert "no failover by baton_health" in message and "epoch is 2" in message
    assert control.plane().current("crashy") == took


def test_the_failover_records_why_it_happened():
    control, _, _ = fail_over_with_green_at({0: 40, 1: 50})
    assert control.plane().current("crashy").handoff.reason.startswith("found dead by baton_health")


def test_an_expired_lease_makes_a_live_looking_slot_dead():
    from baton.health import HealthPolicy
    from baton.leases import Lease

    lease = Lease(
        app="crashy",
        slot=Slot.BLUE,
        launch="abcdef123",
        host="h",
        pid=7,
        pid_start=1,
        state=SlotState.RUNNING,
        role=Role.ACTIVE,
        epoch_seen=1,
        seq=9,
        ts_ms=100_000,
        ttl_ms=4000,
        interval_ms=1000,
    )
    healthy = SlotHealth("crashy", Slot.BLUE, Verdict.HEALTHY)
    spec = SlotSpec(desired=SlotState.RUNNING, started_ms=50_000)
    policy = HealthPolicy()
    fresh = HealthCheckOperator.with_lease_check(spec, healthy, lease, 108_000, policy)
    assert fresh.verdict is Verdict.HEALTHY  # within ttl + the clock skew tolerance
    dead = HealthCheckOperator.with_lease_check(spec, healthy, lease, 110_000, policy)
    assert dead.verdict is Verdict.DEAD and dead.findings[0].rule == "lease"
    assert "not renewed for 10 s" in dead.reason and "pid 7 on h" in dead.reason
    released = dataclasses.replace(lease, state=SlotState.STOPPED)
    assert HealthCheckOperator.with_lease_check(spec, healthy, released, 110_000, policy).verdict is Verdict.HEALTHY
    restarted = dataclasses.replace(spec, started_ms=200_000)  # the lease is the launch's before the restart
    assert HealthCheckOperator.with_lease_check(restarted, healthy, lease, 210_000, policy).verdict is Verdict.HEALTHY


def test_a_standby_short_of_the_fence_takes_over_at_once_and_reaches_it_first():
    control, message, _ = fail_over_with_green_at({0: 10, 1: 50})
    rec = control.plane().current("crashy")
    assert (rec.active, rec.epoch, rec.fence) == (Slot.GREEN, 2, None) and "30 records short" in message
    # What the new active reads up to before it emits (spark_apps.runtime.coordination.follower): what blue emitted.
    assert (rec.handoff.to, rec.handoff.fence) == (Slot.GREEN, {0: 40, 1: 50})


def test_a_standby_past_what_the_dead_active_emitted_is_not_handed_the_role():
    control, message, _ = fail_over_with_green_at({0: 41, 1: 50})
    rec = control.plane().current("crashy")
    assert (rec.active, rec.epoch, rec.fence) == (Slot.BLUE, 1, None)
    assert "processed past" in message and "restarting blue instead" in message


def test_only_a_live_running_standby_can_take_over():
    control = running_app()
    rec = control.plane().current("crashy")
    alive = SlotHealth("crashy", Slot.GREEN, Verdict.HEALTHY)
    assert HealthCheckOperator.can_fail_over(rec, Slot.GREEN, alive)
    assert not HealthCheckOperator.can_fail_over(rec, Slot.GREEN, SlotHealth("crashy", Slot.GREEN, Verdict.STARTING))
    assert not HealthCheckOperator.can_fail_over(rec, Slot.GREEN, None)


def test_a_fence_left_by_a_dead_handoff_is_lifted_once_expired():
    from baton.control_plane import ControlPlane
    from baton.handoff import with_fence
    from tests.support.fakes import MemoryControlStore

    plane = ControlPlane(MemoryControlStore(), writer="test")
    plane.move_slot("app", Slot.BLUE, SlotState.STARTING, version="v1")
    rec = plane.update("app", with_fence({0: 10}, 1, expires_ms=5_000))
    op = HealthCheckOperator(task_id="check")
    op.clock = lambda: 4.0
    assert op.lift_stale_fence(rec, plane) is None and plane.current("app").fence == {0: 10}
    op.clock = lambda: 6.0
    lifted, message = op.lift_stale_fence(rec, plane)
    assert lifted.fence is None and plane.current("app").fence is None
    assert "lifted the fence {0: 10}" in message and "blue emits on at epoch 1" in message


class Relaunched:
    """A slot whose running launch began at launched_s (alive or not)."""

    def __init__(self, launched_s, alive=True):
        self.launched_s, self.alive = launched_s, alive

    def launcher(self):
        return SimpleNamespace(read_record=lambda app, slot: SimpleNamespace(launched_at=self.launched_s))

    def find(self, app, slot):
        return object() if self.alive else None


def test_a_stopped_record_older_than_the_running_launch_is_the_previous_launch_s():
    """A restart stops the old launch after its spec's start time, then promotes the new one: the old
    launch's STOPPED record must not make the new one dead (seen in CI: baton_health restarted an
    upgraded standby 3 s after its promotion)."""
    from baton.health import Finding, HealthPolicy, Severity

    policy = HealthPolicy()
    dead = SlotHealth(
        "crashy",
        Slot.BLUE,
        Verdict.DEAD,
        [Finding("liveness", Severity.CRITICAL, "slot is stopped")],
        last=status(SlotState.STOPPED, 100_000),
    )
    spec = dataclasses.replace(SPEC, started_ms=99_000)
    check = HealthCheckOperator.with_newer_launch
    starting = check(APP, Slot.BLUE, spec, dead, Relaunched(100.2), 103_000, policy)
    assert starting.verdict is Verdict.STARTING and "previous launch" in starting.findings[0].message
    late = check(APP, Slot.BLUE, spec, dead, Relaunched(100.2), 100_200 + int(policy.start_grace_s * 1000) + 1, policy)
    assert late.verdict is Verdict.DEAD and "after its launch" in late.findings[0].message
    # The record is newer than the launch (the launch itself stopped), or the launch is gone: dead.
    assert check(APP, Slot.BLUE, spec, dead, Relaunched(99.5), 103_000, policy) is dead
    assert check(APP, Slot.BLUE, spec, dead, Relaunched(100.2, alive=False), 103_000, policy) is dead


def test_a_dead_slot_moved_by_another_run_since_the_check_read_it_is_left_alone():
    """The e2e race: the check read green STARTING on v3 (the upgrade's standby, refused at its first
    batch), then the upgrade's abort put green back on v1 and launched it; a restart from the record
    read would stop that launch and start v3 again."""
    control = running_app()
    plane = control.plane()
    read = plane.move_slot("crashy", Slot.GREEN, SlotState.STARTING, version="v3")
    plane.move_slot("crashy", Slot.GREEN, SlotState.STOPPING, reason="put back on v1")
    plane.move_slot("crashy", Slot.GREEN, SlotState.STOPPED, reason="put back on v1")
    put_back = plane.move_slot("crashy", Slot.GREEN, SlotState.STARTING, version="v1", reason="put back on v1")
    started, stopped = [], []
    spark = SimpleNamespace(
        stop=lambda app, slot, grace_s: stopped.append(slot),
        ensure_started=lambda *a, **k: started.append(a),
        launcher=lambda: None,
    )
    dead = SlotHealth("crashy", Slot.GREEN, Verdict.DEAD, last=status(SlotState.FAILED, 2_000, "schema refused"))
    definition = load_definition(Path(__file__).parents[3] / "include" / "apps" / "click_counts.yaml")
    app = dataclasses.replace(definition, name="crashy")

    action = HealthCheckOperator(task_id="check").act_on(app, Slot.GREEN, dead, read, control, spark)

    assert action.startswith("left alone: crashy/green is starting on v1")
    assert started == [] and stopped == []
    assert plane.current("crashy") == put_back


def restarted_slot_checked(verdict, state):
    """Blue restarted (desired STARTING), then checked: `verdict` with its last status in `state`.
    (the action, blue's desired state after it)"""
    control = running_app()
    plane = control.plane()
    spec = plane.move_slot("crashy", Slot.BLUE, SlotState.STARTING, reason="restarted: dead", started_ms=1_000)
    health = SlotHealth("crashy", Slot.BLUE, verdict, last=status(state, 2_000))
    action = HealthCheckOperator(task_id="check").act_on(APP, Slot.BLUE, health, spec, control, Spark())
    return action, plane.current("crashy").slots[Slot.BLUE].desired


def test_a_restart_that_came_up_is_desired_running_again_even_over_its_budgets():
    """A restarted standby over its batch-time budget on a busy host (DEGRADED) is up: it must be desired
    RUNNING again, or it may never take over from the active by itself (baton.leases.decide_takeover)."""
    for verdict in (Verdict.HEALTHY, Verdict.DEGRADED):
        assert restarted_slot_checked(verdict, SlotState.RUNNING) == ("running again", SlotState.RUNNING)
    assert restarted_slot_checked(Verdict.HEALTHY, SlotState.RESTORING) == ("running again", SlotState.RUNNING)


def test_a_restart_not_up_yet_stays_starting():
    assert restarted_slot_checked(Verdict.STARTING, SlotState.RESTORING) == ("", SlotState.STARTING)
    assert restarted_slot_checked(Verdict.DEGRADED, SlotState.STARTING) == ("", SlotState.STARTING)
    assert restarted_slot_checked(Verdict.DEGRADED, SlotState.STOPPING) == ("", SlotState.STARTING)


def test_a_lease_older_than_the_driver_s_restart_in_place_is_the_dead_driver_s():
    from baton.health import HealthPolicy
    from baton.leases import Lease

    lease = Lease("crashy", Slot.BLUE, "abc", "h", 7, 1, SlotState.RUNNING, Role.ACTIVE, 1, 9, 100_000, 4000, 1000)
    healthy = SlotHealth("crashy", Slot.BLUE, Verdict.HEALTHY)
    spec = SlotSpec(desired=SlotState.RUNNING, started_ms=50_000)
    silent = HealthCheckOperator.with_lease_check(spec, healthy, lease, 120_000, HealthPolicy())
    assert silent.verdict is Verdict.DEAD
    relaunched = HealthCheckOperator.with_lease_check(spec, healthy, lease, 120_000, HealthPolicy(), 110_000)
    assert relaunched.verdict is Verdict.HEALTHY


def test_a_slot_its_supervisor_restarts_is_starting_not_dead_until_its_grace_ends():
    """The wrapper restarts the driver (baton.driver_wrapper): baton_health must not restart it a second
    time (its restart would kill the one under way) until the new driver is overdue."""
    from baton.health import HealthPolicy, restarting_in_place

    policy = HealthPolicy(start_grace_s=60)
    dead = SlotHealth("crashy", Slot.BLUE, Verdict.DEAD, last=status(SlotState.RUNNING, 100_000))
    waiting = restarting_in_place(dead, "waiting", 130_000, 1, 110_000, policy)
    assert (
        waiting.verdict is Verdict.STARTING
        and "exited with code 1: its supervisor restarts it in 20 s" in waiting.reason
    )
    started = restarting_in_place(dead, "relaunched", 101_000, -9, 111_000, policy)
    assert started.verdict is Verdict.STARTING and "restarted it 10 s ago" in started.reason
    overdue = restarting_in_place(dead, "relaunched", 101_000, -9, 170_000, policy)
    assert overdue.verdict is Verdict.DEAD and "69 s after its supervisor restarted it" in overdue.reason
    # A driver that reported its end while its launch lives is ending: its wrapper restarts it or gives up.
    failed = SlotHealth("crashy", Slot.BLUE, Verdict.DEAD, last=status(SlotState.FAILED, 102_000, "boom"))
    for state in ("running", "relaunched"):
        ending = restarting_in_place(failed, state, 101_000, None, 111_000, policy)
        assert ending.verdict is Verdict.STARTING and "its driver is ending (failed)" in ending.reason
        assert restarting_in_place(failed, state, 101_000, None, 140_000, policy) is failed  # past 30 s: dead
    # The first driver, or the new one once it reported: its own records are judged, as for any start.
    healthy = SlotHealth("crashy", Slot.BLUE, Verdict.HEALTHY, last=status(SlotState.RUNNING, 102_000))
    assert restarting_in_place(healthy, "relaunched", 101_000, -9, 111_000, policy) is healthy
    assert restarting_in_place(dead, "running", 90_000, None, 111_000, policy) is dead
    stopped = SlotHealth("crashy", Slot.BLUE, Verdict.STOPPED)
    assert restarting_in_place(stopped, "relaunched", 101_000, -9, 111_000, policy) is stopped
