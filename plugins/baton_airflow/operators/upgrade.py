"""The rolling upgrade's steps (baton.upgrade has the gates, baton.handoff the cutover protocol).

Each step records its intent in the control record before it acts and recognises its own earlier
work when retried: a re-run upgrade finds the slot already on the new version and reattaches to its
launch; a re-run rollback finds the role already flipped back.
"""

from __future__ import annotations

import time
from typing import Any

from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from baton.apps import AppDefinitionError, load_version, version_path
from baton.conditions import Check, slot_running
from baton.fence_gate import FenceGate
from baton.handoff import HandoffError, fail_over, finished, other, without_fence
from baton.lifecycle import IllegalTransition
from baton.plans import Cutover, SlotRestart, StateCheckPlan, UpgradePlan, VersionChange
from baton.records import UPGRADE_HOLD, Slot, SlotState, StateDigest
from baton.reprocess import RequestRefused, begin_operation, end_operation
from baton.upgrade import Policy, ask_state_check
from baton_airflow.hooks.control import BatonControlHook
from baton_airflow.hooks.spark import BatonSparkHook
from baton_airflow.operators.handoff import plan_ahead, set_fence
from baton_airflow.operators.slots import resolve
from baton_airflow.operators.steps import (
    AbortStepsOperator,
    AppOperator,
    fail_with_reason,
    first_reason,
    lift_own_fence,
)
from baton_airflow.triggers.base import met_or_raise
from baton_airflow.triggers.status import SlotRunningTrigger

# How long a rolling upgrade may hold its app: its waits (preflight 15 min, warm-up and state check 15
# min each, fences, settle, the old active's warm-up) with room. Past it, a run that died frees the app.
UPGRADE_HOLD_S = 3 * 3600


def upgrade_operation(run_id: str) -> str:
    """The hold a rolling upgrade run keeps on its app (ControlRecord.operation; it leaves failover by
    lease on: ControlRecord.role_held)."""
    return f"{UPGRADE_HOLD}{run_id}"


class PreflightOperator(AppOperator):
    """Before anything changes: the new version's definition is valid and keeps the app's topics, the
    policy is known, both slots run, no handoff is under way and the active is not on that version
    already. Returns the upgrade plan.

    The new code's check against the stored state is the upgraded standby's own first batch: Spark
    checks the state schema when the stateful operator loads its state, so an incompatible version
    fails that batch (STATE_STORE_*_SCHEMA_NOT_COMPATIBLE) before the standby could ever emit, and the
    abort puts it back on the old version from a copy of the state it left (keep_way_back). The
    preflight used to replay the standby's last batch in a third Spark application beside both slots:
    71-200 s at the seed's rate through Airflow, with the active falling behind meanwhile."""

    template_fields = ("app", "version", "policy")

    def __init__(self, *, version: str, policy: str = "exact", retries: int = 1, **kwargs: Any):
        super().__init__(retries=retries, **kwargs)
        self.version, self.policy = version, policy

    def execute(self, context: Any) -> dict[str, Any]:
        app, _ = resolve(self.app, "blue")
        try:
            policy = Policy(self.policy)
            new = load_version(app.name, str(self.version))
            definition = version_path(app.name, str(self.version))
        except (AppDefinitionError, ValueError) as exc:
            raise fail_with_reason(context, str(exc)) from None
        control, spark = self.hooks()
        plane = control.plane()
        rec = plane.current(app.name)
        if rec is None:
            raise fail_with_reason(
                context, f"{app.name} has never been started: start it (baton_lifecycle) before upgrading"
            )
        for slot in Slot:
            spec = rec.slots.get(slot)
            if spec is None or spec.desired is not SlotState.RUNNING or spark.find(app.name, slot) is None:
                state = spec.desired.value if spec else "not started"
                raise fail_with_reason(
                    context, f"{app.name}/{slot.value} is {state}: a rolling upgrade needs both slots running"
                )
        if rec.fence is not None:
            raise fail_with_reason(context, f"{app.name}: a fence {rec.fence} is set: another handoff is under way")
        standby = other(rec.active)
        versions = {s: rec.slots[s].version or app.version for s in Slot}
        if versions[rec.active] == new.version:
            raise fail_with_reason(context, f"{app.name}: the active ({rec.active.value}) already runs {new.version}")
        # The app is this run's until the teardown (EndUpgradeOperator) frees it: another upgrade,
        # reprocess or cutover of the app is refused meanwhile; other apps' runs go on.
        operation = upgrade_operation(context["run_id"])
        now_ms = plane.now_ms()
        try:
            rec = plane.update(app.name, begin_operation(operation, now_ms + UPGRADE_HOLD_S * 1000, now_ms))
        except RequestRefused as exc:
            raise fail_with_reason(context, f"{app.name}: {exc}") from None
        message = (
            f"{new.version} is valid and keeps {app.name}'s topics; the standby {standby.value}'s first batch "
            f"on it checks the state schema"
        )
        self.log.info("%s", message)
        return UpgradePlan(
            app=app.name,
            version=new.version,
            definition=str(definition),
            policy=policy.value,
            from_version=versions[rec.active],
            active=rec.active,
            standby=standby,
            epoch=rec.epoch,
            preflight=message,
            operation=operation,
        ).to_xcom()


class UpgradeSlotOperator(AppOperator):
    """Move one slot to the plan's version on its own checkpoint: stage the new version's launch (its
    JVM and session start up beside the old one), stop the old one at a batch boundary (it reports the
    state it leaves), promote the new one (it digests what it restores), wait until it runs. `plan` is
    the PreflightOperator's XCom; `role` picks the slot: "standby" or "active" (the old active,
    upgraded after the cutover). Returns what the restore check compares."""

    template_fields = ("app", "plan")

    # apache/airflow#71580: a deferred task can end "success but queued" (retries=2)
    def __init__(self, *, plan: Any, role: str, wait_timeout_s: float = 600.0, retries: int = 2, **kwargs: Any):
        super().__init__(retries=retries, **kwargs)
        if role not in ("standby", "active"):
            raise ValueError(f"role must be 'standby' or 'active', got {role!r}")
        self.plan, self.role, self.wait_timeout_s = plan, role, wait_timeout_s

    def execute(self, context: Any) -> None:
        plan = UpgradePlan.of(self.plan)
        app, slot = resolve(self.app, getattr(plan, self.role))
        version, definition = plan.version, plan.definition
        control, spark = self.hooks()
        plane = control.plane()
        spec = plane.require(app.name).slots[slot]
        why = f"rolling upgrade to {version} ({context['run_id']})"
        try:
            if spec.version != version:
                if spec.desired is not SlotState.STOPPED:  # else a retry: stopped already
                    # The new version's JVM and session start up while the old one still runs and
                    # stops: ensure_started below promotes it, the restart's downtime without them.
                    # Not waiting for them to be up before the stop: beside both busy slots the start-up
                    # took twice as long (13-15 s), and the whole upgrade 191 s against 163 s.
                    spark.stage(definition, slot, control.bootstrap, generation=spec.generation)
                    # Intent first: the slot stops by itself at a batch boundary on STOPPING.
                    plane.move_slot(app.name, slot, SlotState.STOPPING, reason=why)
                    result = spark.stop(app.name, slot, grace_s=60, self_stop_s=60, keep_staged=True)
                    self.log.info("%s/%s stopped (graceful: %s)", app.name, slot.value, result.graceful)
                    plane.move_slot(app.name, slot, SlotState.STOPPED, reason=why)
                if self.role == "standby":  # the way back, should the new version be refused before the cutover
                    state = self.slot_state(spark)
                    kept = state.keep_way_back(state.checkpoint(app.name, slot, spec.generation))
                    self.log.info("%s/%s: the state it left is kept for the way back: %s", app.name, slot.value, kept)
                else:  # after the cutover settled: the new active's way back is of no more use
                    new_active = other(slot)
                    state = self.slot_state(spark)
                    state.drop_way_back(
                        state.checkpoint(app.name, new_active, plane.require(app.name).slots[new_active].generation)
                    )
                spec = plane.move_slot(
                    app.name, slot, SlotState.STARTING, version=version, reason=why, started_ms=plane.now_ms()
                ).slots[slot]
            elif spec.desired is not SlotState.RUNNING:
                spec = plane.move_slot(app.name, slot, SlotState.STARTING, reason=why).slots[slot]
        except IllegalTransition as exc:
            spark.discard_staged(app.name, slot)
            raise fail_with_reason(context, f"{app.name}/{slot.value}: {exc}") from None
        proc = spark.ensure_started(definition, slot, control.bootstrap, generation=spec.generation)
        left = _left_digest(control, app.name, slot, int(proc.launched_at * 1000))
        self.log.info("%s/%s: %s launched (pid %s); it left %s", app.name, slot.value, version, proc.pid, left)
        self.defer(
            trigger=SlotRunningTrigger(
                app=app.name,
                slot=slot.value,
                bootstrap=control.bootstrap,
                since_ms=int(proc.launched_at * 1000),
                timeout_s=self.wait_timeout_s,
            ),
            method_name="execute_complete",
            kwargs={
                "launch": BatonSparkHook.describe(proc),
                "left": left.to_json() if left else None,
                "since_ms": int(proc.launched_at * 1000),
            },
        )

    def execute_complete(
        self, context: Any, event: dict[str, Any], launch: dict[str, Any], left: dict[str, Any] | None, since_ms: int
    ) -> dict[str, Any]:
        plan = UpgradePlan.of(self.plan)
        app, slot = resolve(self.app, getattr(plan, self.role))
        met_or_raise(context, event, lead=f"{plan.version} did not start", detail=f"driver log: {launch.get('log')}")
        control, _ = self.hooks()
        control.plane().move_slot(app.name, slot, SlotState.RUNNING, reason="")
        return SlotRestart(slot=slot, since_ms=since_ms, launch=launch, version=plan.version, left=left).to_xcom()


class StateCheckPositionOperator(AppOperator):
    """Ask both slots for their state at a position P `ahead_s` of arrivals ahead of the input
    (ControlRecord.check_at): each ends a batch exactly at P, digests the state there and reads on
    (a batch boundary, not a stop); StatesAgreeSensor compares the digests. The output keeps
    flowing, so the check (a Spark job in each slot, seconds under load) is not on its path, as a
    check at the fence would be. A retry asks again at a new P."""

    template_fields = ("app", "ahead_s")

    def __init__(self, *, ahead_s: float | str = 2.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.ahead_s = ahead_s

    def execute(self, context: Any) -> dict[str, Any]:
        app, _ = resolve(self.app, "blue")
        control, _ = self.hooks()
        plane = control.plane()
        rec = plane.require(app.name)
        standby = other(rec.active)
        position = plan_ahead(control, app, rec, float(self.ahead_s))
        plane.update(app.name, ask_state_check(position))
        self.log.info("%s: both slots digest their state at %s", app.name, position)
        return StateCheckPlan(
            position=position, active=rec.active, standby=standby, ahead_s=float(self.ahead_s)
        ).to_xcom()


def _left_digest(control: BatonControlHook, app: str, slot: Slot, launched_ms: int) -> StateDigest | None:
    """The state the slot's previous launch left at its stop: the last "stop" digest before this launch."""
    for rec in reversed(control.status(app, slot)):
        if rec.ts_ms < launched_ms and rec.state_digest is not None and rec.state_digest.at == "stop":
            return rec.state_digest
    return None


# How many fences a rollback plans (each twice as far ahead as the one before) before it stops the new
# active and fails over to the old slot at what the new one emitted.
MAX_ROLLBACK_FENCES = 4


class RollbackOperator(AppOperator):
    """The new active failed to settle: flip the role back to the old slot, still hot on the old
    version, at an exact fence (the same protocol as the cutover, the other way), then fail the run
    with the settle check's reason. Always converges while the old slot runs: a fence the new active
    passed before it saw it is planned again, twice as far ahead; a new active that is dead, or reaches
    no fence after MAX_ROLLBACK_FENCES, is stopped and the old slot takes over at what it emitted (a
    failover). `cutover` is the CutoverOperator's XCom, `plan` the preflight's."""

    template_fields = ("app", "plan", "cutover", "ahead_s", "fence_timeout_s")

    def __init__(
        self,
        *,
        plan: Any,
        cutover: Any,
        settle_task_id: str = "settle",
        ahead_s: float | str = 2.0,
        fence_timeout_s: float | str = 120.0,
        correct: bool = False,
        trigger_rule: str = "one_failed",
        retries: int = 2,
        **kwargs: Any,
    ):
        super().__init__(trigger_rule=trigger_rule, retries=retries, **kwargs)
        self.plan, self.cutover, self.settle_task_id = plan, cutover, settle_task_id
        self.ahead_s, self.fence_timeout_s, self.correct = ahead_s, fence_timeout_s, correct

    def execute(self, context: Any) -> None:
        if not self.cutover:  # the cutover itself failed (abort handles that): nothing moved, nothing to undo
            raise AirflowSkipException("no cutover happened: nothing to roll back")
        plan, cutover = VersionChange.of(self.plan), Cutover.of(self.cutover)
        app, new_slot = resolve(self.app, cutover.active)
        back_to, epoch = other(new_slot), cutover.epoch
        reason = context["ti"].xcom_pull(task_ids=self.settle_task_id, key="reason") or "the settle check failed"
        control, spark = self.hooks()
        plane = control.plane()
        rec = plane.require(app.name)
        by = f"{context['run_id']}/rollback"
        how = "at a fence"
        if finished(rec, by) is not None or (rec.epoch == epoch + 1 and rec.active is back_to):
            self.log.info("%s: already rolled back to %s at epoch %s", app.name, back_to.value, rec.epoch)
        elif rec.active is not new_slot or rec.epoch != epoch:
            raise AirflowFailException(
                f"{app.name}: the role moved on since the cutover ({rec.active.value} at epoch "
                f"{rec.epoch}): not rolling back; the settle check said: {reason}"
            )
        else:
            how = self.roll_back(control, spark, app, plan, new_slot, epoch, by, reason)
        plane.move_slot(
            app.name, new_slot, SlotState.RUNNING, reason=f"rolled back from {plan.version}: {reason}"[:500]
        )
        if plan.operation:  # a reprocess: the app is free again
            plane.update(app.name, end_operation(plan.operation))
        # The run's outcome, kept where the REST API shows it (the task's XCom) as well as in its log.
        raise fail_with_reason(
            context,
            f"{app.name}: rolled back to {back_to.value} on {plan.from_version} "
            f"(epoch {epoch + 1}, {how}); {plan.version} did not settle: {reason}",
        )

    def roll_back(
        self,
        control: BatonControlHook,
        spark: BatonSparkHook,
        app,
        plan: VersionChange,
        new_slot: Slot,
        epoch: int,
        by: str,
        reason: str,
    ) -> str:
        """Hand the role back to the old slot; returns how ("at a fence", or "by a failover")."""
        back_to, plane = other(new_slot), control.plane()
        ahead = float(self.ahead_s)
        for attempt in range(1, MAX_ROLLBACK_FENCES + 1):
            self.require_running(control, spark, app, plan, back_to, new_slot, reason)
            if spark.find(app.name, new_slot) is None:
                self.log.warning("%s: the new active %s is gone", app.name, new_slot.value)
                break
            try:  # this rollback's fence, kept if a retry finds it set; another handoff's is refused
                rec = set_fence(control, app, plane.require(app.name), ahead, by=by)
            except HandoffError as exc:
                raise AirflowFailException(
                    f"{app.name}: cannot roll back: {exc}; the settle check said: {reason}"
                ) from None
            self.log.warning(
                "%s: rolling back to %s: fence %s (try %d, %g s ahead)",
                app.name,
                back_to.value,
                rec.fence,
                attempt,
                ahead,
            )
            # Cut over the moment the gate is met. After a corrected-output cutover, the old slot's state
            # is published again on the way back.
            assert rec.fence is not None  # set_fence returns the record with its fence
            check = self.wait_at_fence(control, plane, app, back_to, dict(rec.fence), epoch)
            if check.met:
                return "at a fence"
            try:
                plane.update(app.name, without_fence(epoch, by=by))
            except HandoffError as exc:  # the role moved on meanwhile (someone else's handoff)
                raise AirflowFailException(
                    f"{app.name}: rollback stopped: {exc}; the settle check said: {reason}"
                ) from None
            self.log.warning("%s: fence not held (%s); planning another", app.name, check.message)
            ahead *= 2
        # The new active reaches no fence: stop it, and the old slot takes over at what it emitted.
        spark.stop(app.name, new_slot, grace_s=10)  # a late write of it is fenced by Kafka anyway
        marker = control.last_commit(app)
        try:
            ok, message = fail_over(
                plane,
                app.name,
                app.input.partitions,
                new_slot,
                epoch,
                dict(marker.emitted) if marker is not None else {},
                control.status(app.name, back_to, last_n=500),
                reason=f"rollback: the new active reached no fence; {reason}",
            )
        except HandoffError as exc:
            now = plane.require(app.name)
            if now.active is back_to and now.epoch > epoch:  # the old slot took over by itself (its lease watch)
                self.log.warning(
                    "%s: %s took the role back by itself: %s",
                    app.name,
                    back_to.value,
                    now.handoff.reason if now.handoff else "",
                )
                return "by the old slot's own failover"
            raise AirflowFailException(f"{app.name}: rollback failed: {exc}; the settle check said: {reason}") from None
        if not ok:
            raise AirflowFailException(f"{app.name}: rollback failed: {message}; the settle check said: {reason}")
        self.log.warning("%s: %s", app.name, message)
        return "by a failover: the new active was stopped"

    def require_running(
        self,
        control: BatonControlHook,
        spark: BatonSparkHook,
        app,
        plan: VersionChange,
        back_to: Slot,
        new_slot: Slot,
        reason: str,
    ) -> None:
        """The old slot can take the role back only while it runs; else say so, and what to do."""
        spec = control.plane().require(app.name).slots.get(back_to)
        if spec is not None and spec.desired is SlotState.RUNNING and spark.find(app.name, back_to) is not None:
            return
        state = spec.desired.value if spec is not None else "not started"
        raise AirflowFailException(
            f"{app.name}: cannot roll back: the old slot {back_to.value} ({plan.from_version}) is {state}, "
            f"not running; {new_slot.value} stays active on {plan.version}. Start {back_to.value} "
            f"(baton_lifecycle) and hand the role back with baton_cutover, or upgrade again with version "
            f"{plan.from_version}. The settle check said: {reason}"
        )

    def wait_at_fence(
        self, control: BatonControlHook, plane, app, standby: Slot, fence: dict[int, int], epoch: int
    ) -> Check:
        """The gate at `fence` and the cutover the moment it is met (baton.fence_gate.FenceGate): met, failed, or
        not met within fence_timeout_s (a Check with neither flag)."""
        deadline = time.monotonic() + float(self.fence_timeout_s)
        gate = FenceGate(
            plane,
            app.name,
            standby,
            epoch,
            fence,
            lambda: control.last_commit(app),
            lambda: control.status(app.name, other(standby), last_n=500),
            lambda: control.status(app.name, standby, last_n=500),
            trail_records=app.max_lag_records,
            correct=self.correct,
        )
        while True:
            check = gate.look()
            if check.met or check.failed:
                return check
            if time.monotonic() > deadline:
                return Check(message=f"{fence} not reached within {self.fence_timeout_s} s")
            time.sleep(0.1)


class EndUpgradeOperator(AppOperator):
    """The run's teardown: frees the app for its next operation however the run ended (Airflow leaves a
    teardown out of the run's state, which stays its outcome). Frees only this run's hold."""

    def execute(self, context: Any) -> None:
        app, _ = resolve(self.app, "blue")
        control, _ = self.hooks()
        plane = control.plane()
        operation = upgrade_operation(context["run_id"])
        rec = plane.current(app.name)
        if rec is None or rec.operation != operation:
            self.log.info("%s: not held by this run", app.name)
            return
        plane.update(app.name, end_operation(operation))
        self.log.info("%s: free for its next operation", app.name)


class AbortUpgradeOperator(AbortStepsOperator):
    """A gate before the cutover failed: lift the fence if one is set at the plan's epoch (the active
    keeps serving, untouched), put the standby back on the old version from the state it left if it
    was upgraded already (a new version refused at its first batch, a failed restore, warm-up or state
    check), and fail the run with the failed step's reason."""

    # How long the standby put back on the old version may take to run again.
    PUT_BACK_TIMEOUT_S = 300.0

    def execute(self, context: Any) -> None:
        reason = first_reason(context, self.steps)
        app, _ = resolve(self.app, "blue")
        control, spark = self.hooks()
        plane = control.plane()
        rec = plane.current(app.name)
        plan = UpgradePlan.of(self.plan) if self.plan else None  # none: refused at the preflight
        where = ""
        if plan is not None and rec is not None:
            rec = lift_own_fence(plane, rec, plan.epoch, context["run_id"], self.log)
            spec = rec.slots.get(plan.standby)
            if spec is not None and spec.version == plan.version and rec.active is not plan.standby:
                where = self.put_back(control, spark, app, plan, plan.standby, spec, reason)
        active = f"{rec.active.value} stays active at epoch {rec.epoch}" if rec is not None else "nothing changed"
        raise AirflowFailException(f"{app.name}: rolling upgrade aborted before the cutover: {reason}; {active}{where}")

    def put_back(
        self, control: BatonControlHook, spark: BatonSparkHook, app, plan: UpgradePlan, slot: Slot, spec, reason: str
    ) -> str:
        """The standby on the old version again, from the copy of the state it left (UpgradeSlotOperator)."""
        old, new = plan.from_version, plan.version
        state = self.slot_state(spark)
        checkpoint = state.checkpoint(app.name, slot, spec.generation)
        if not state.has_way_back(checkpoint):
            return (
                f"; the standby {slot.value} already runs {new} and no copy of the state it left is kept "
                f"(run the upgrade with version {old} to put it back)"
            )
        plane, why = control.plane(), f"put back on {old}: {reason}"[:500]
        if spec.desired is not SlotState.STOPPED:  # intent first; the slot stops by itself on STOPPING
            plane.move_slot(app.name, slot, SlotState.STOPPING, reason=why)
            spark.stop(app.name, slot, grace_s=30, self_stop_s=30)
            plane.move_slot(app.name, slot, SlotState.STOPPED, reason=why)
        state.take_way_back(checkpoint)
        spec = plane.move_slot(
            app.name, slot, SlotState.STARTING, version=old, reason=why, started_ms=plane.now_ms()
        ).slots[slot]
        proc = spark.ensure_started(
            str(version_path(app.name, old)), slot, control.bootstrap, generation=spec.generation
        )
        since_ms, deadline = int(proc.launched_at * 1000), time.monotonic() + self.PUT_BACK_TIMEOUT_S
        while (check := slot_running(control.status(app.name, slot, last_n=500), since_ms)).waiting:
            if time.monotonic() > deadline:
                return (
                    f"; the standby {slot.value} was restarted on {old} from the state it left and is not "
                    f"running yet after {self.PUT_BACK_TIMEOUT_S:.0f} s (the health DAG watches it)"
                )
            time.sleep(2)
        if check.failed:
            return f"; the standby {slot.value}, put back on {old}, did not start: {check.message}"
        plane.move_slot(app.name, slot, SlotState.RUNNING, reason="")
        self.log.warning("%s/%s: back on %s from the state it left", app.name, slot.value, old)
        return f"; the standby {slot.value} is back on {old}, from the state it left"
