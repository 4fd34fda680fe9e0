"""The handoff's steps as operators (baton.handoff has the protocol). Each step is a compare-and-set on
the control record that a retry recognises as done, so killing a task anywhere and retrying converges:
no second fence, no double epoch bump, no lost fence."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, NoReturn

from airflow.sdk import BaseOperator

from baton import handoff
from baton.apps import AppDefinition
from baton.handoff import HandoffError, fence_passed, finished, moved_fence, other, with_fence
from baton.plans import Cutover, HandoffPlan
from baton.records import ControlRecord, Handoff, SlotState
from baton_airflow.assets import HANDOFFS, emit_handoff, output_asset
from baton_airflow.hooks.control import BatonControlHook
from baton_airflow.hooks.kafka import BatonKafkaHook
from baton_airflow.operators.slots import resolve
from baton_airflow.operators.steps import fail_with_reason, first_reason, lift_own_fence
from baton_airflow.triggers.base import met_or_raise
from baton_airflow.triggers.cutover import CutoverTrigger


def plan_ahead(
    control: BatonControlHook, app: AppDefinition, rec: ControlRecord, ahead_s: float, fence: bool = False
) -> dict[int, int]:
    """A position ahead of the input the active has not read yet (baton.handoff.plan_ahead); `fence`:
    one the other slot must reach as well before it takes over."""
    read_standby = (lambda: control.status(app.name, other(rec.active))) if fence else None
    return handoff.plan_ahead(
        lambda: control.status(app.name, rec.active),
        lambda: control.input_end(app),
        app.input.partitions,
        ahead_s,
        read_standby=read_standby,
    )


def set_fence(
    control: BatonControlHook,
    app: AppDefinition,
    rec: ControlRecord,
    ahead_s: float,
    hold_s: float = 600.0,
    by: str = "",
) -> ControlRecord:
    """Set F `ahead_s` of arrivals beyond the input's end (plan_ahead), at rec's epoch. After `hold_s`
    the health DAG lifts it if the handoff has not finished (its run died)."""
    fence = plan_ahead(control, app, rec, ahead_s, fence=True)
    return control.plane().update(app.name, with_fence(fence, rec.epoch, int((time.time() + hold_s) * 1000), by))


class _HandoffOperator(BaseOperator):
    template_fields: Sequence[str] = ("app",)

    def __init__(
        self,
        *,
        app: str,
        kafka_conn_id: str = BatonKafkaHook.default_conn_name,
        retries: int = 2,
        retry_delay: timedelta = timedelta(seconds=5),
        **kwargs: Any,
    ):
        super().__init__(retries=retries, retry_delay=retry_delay, **kwargs)
        self.app, self.kafka_conn_id = app, kafka_conn_id

    def control(self) -> BatonControlHook:
        return BatonControlHook(self.kafka_conn_id)


class FenceOperator(_HandoffOperator):
    """Set the fence F a little ahead of the input (`ahead_s` of arrivals at the active's input rate).
    A fence already set at this epoch (a retry, or a resumed run) is reused, not replaced. `hold_s`:
    how long the handoff may hold it; past that the health DAG lifts it (a run that died)."""

    template_fields = ("app", "ahead_s", "hold_s")

    def __init__(self, *, ahead_s: float | str = 2.0, hold_s: float | str = 600.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.ahead_s, self.hold_s = ahead_s, hold_s

    def execute(self, context: Any) -> dict[str, Any]:
        app, _ = resolve(self.app, "blue")
        control = self.control()
        plane = control.plane()
        rec = plane.current(app.name)
        if rec is None:
            raise fail_with_reason(context, f"{app.name} has never been started: nothing to hand over")
        run = context["run_id"]
        if (done := finished(rec, run)) is not None:  # this run cut over already (a re-run): its plan again
            self.log.info(
                "%s: this run's handoff to %s at %s is done (epoch %s)", app.name, done.to.value, done.fence, rec.epoch
            )
            return plan_of(done).to_xcom()
        if holder := rec.held_by_another(plane.now_ms(), run):
            raise fail_with_reason(context, f"{app.name}: {holder} is under way: one handoff at a time")
        standby = other(rec.active)
        for slot in (rec.active, standby):
            spec = rec.slots.get(slot)
            if spec is None or spec.desired is not SlotState.RUNNING:
                raise fail_with_reason(
                    context,
                    f"{app.name}/{slot.value} is {spec.desired.value if spec else 'not started'}: "
                    "a handoff needs both slots RUNNING",
                )
        reuse = rec.fence is not None
        try:  # a fence this run set before (a retry) is kept; another handoff's is refused
            rec = set_fence(control, app, rec, float(self.ahead_s), float(self.hold_s), by=run)
        except HandoffError as exc:
            raise fail_with_reason(context, str(exc)) from None
        self.log.info(
            "%s: %s fence %s at epoch %s (%s s ahead)",
            app.name,
            "reusing this run's" if reuse else "set",
            rec.fence,
            rec.epoch,
            self.ahead_s,
        )
        return plan_of(rec.handoff).to_xcom()


def plan_of(handoff: Handoff | None) -> HandoffPlan:
    """The handoff plan the later steps take: fence, epoch it was set at, from and to."""
    if handoff is None:  # a record a fence was just set in carries its handoff
        raise HandoffError("the control record carries no handoff")
    return HandoffPlan(fence=dict(handoff.fence), epoch=handoff.epoch, from_slot=other(handoff.to), to=handoff.to)


# How many fences a cutover plans in all before it gives up: the first one (FenceOperator's), then one
# twice as far ahead each time the active passed the last before it saw it.
MAX_CUTOVER_FENCES = 4


class CutoverOperator(_HandoffOperator):
    """Wait at the fence, then cut over: one write, the standby active at epoch + 1 and the fence lifted
    (baton.handoff explains why one step is safe once the active stands at F). Deferred: the triggerer
    watches the gate (the active's word that it holds at F, then its marker at exactly F, the standby
    live and on its way, within the app's lag budget) and writes the cutover the moment it is met
    (baton.fence_gate.FenceGate), so
    no task start lies between the output stopping at F and the write that lets the new active emit.
    A fence the active passed before it saw it (input resuming after a pause, a busy host) is planned
    again, twice as far ahead each time (`ahead_s` the first step's), up to MAX_CUTOVER_FENCES in all:
    nothing has moved, a farther fence is as safe. Fails if the gate fails otherwise (the standby went
    past F, another handoff moved the epoch) or the fences run out, and with a retry at
    `wait_timeout_s`. `plan` is the FenceOperator's XCom. `correct`: the new active publishes its whole
    state as output on taking over (a reprocess, or the way back)."""

    template_fields = ("app", "plan", "correct", "wait_timeout_s", "ahead_s")

    def __init__(
        self,
        *,
        plan: Any,
        correct: bool | str = False,
        wait_timeout_s: float | str = 120.0,
        ahead_s: float | str = 2.0,
        retries: int = 3,
        **kwargs: Any,
    ):
        # retries: apache/airflow#71580 (a deferred task), and a retry after a timeout
        kwargs.setdefault("outlets", [HANDOFFS])  # the app's output Asset's event, on success
        super().__init__(retries=retries, **kwargs)
        self.plan, self.correct, self.wait_timeout_s, self.ahead_s = plan, correct, wait_timeout_s, ahead_s

    def execute(self, context: Any) -> dict[str, Any]:
        app, _ = resolve(self.app, "blue")
        control = self.control()
        plan = HandoffPlan.of(self.plan)
        rec = control.plane().current(app.name)
        mine = (
            rec.handoff if rec is not None and rec.handoff is not None and rec.handoff.id == context["run_id"] else None
        )
        if mine is not None and mine.epoch == plan.epoch:  # this run planned its fence again before (a retry): that one
            plan = plan_of(mine)
        if rec is not None and rec.active is plan.to and rec.epoch == plan.epoch + 1:  # done before (a retry)
            return self.cut(context, control, app, plan, rec)
        self.wait(control, app, plan, attempt=1)

    def wait(self, control: BatonControlHook, app: AppDefinition, plan: HandoffPlan, attempt: int) -> NoReturn:
        # Looked at every 0.1 s: once the active said it holds at F, a look while it is short of F reads its
        # marker alone (one fetch, baton.fence_gate.FenceGate); the time from the active at F to the write
        # is output gap.
        self.defer(
            trigger=CutoverTrigger(
                app=app.name,
                slot=plan.to.value,
                bootstrap=control.bootstrap,
                fence=plan.fence,
                epoch=plan.epoch,
                trail_records=app.max_lag_records,
                correct=str(self.correct).lower() == "true",
                timeout_s=float(self.wait_timeout_s),
                poll_s=0.1,
            ),
            method_name="execute_complete",
            kwargs={"plan": plan.to_xcom(), "attempt": attempt},
        )

    def execute_complete(
        self, context: Any, event: dict[str, Any], plan: dict[str, Any] | None = None, attempt: int = 1
    ) -> dict[str, Any]:
        app, _ = resolve(self.app, "blue")
        control = self.control()
        planned = HandoffPlan.of(plan if plan is not None else self.plan)
        if event.get("status") == "failed" and attempt < MAX_CUTOVER_FENCES:
            again = self.plan_again(context, control, app, planned, attempt, str(event.get("message", "")))
            if again is not None:
                self.wait(control, app, again, attempt + 1)  # defers: the task resumes here again
        self.log.info("%s", met_or_raise(context, event))
        rec = control.plane().current(app.name)  # observed, not assumed
        if rec is None or rec.active is not planned.to or rec.epoch < planned.epoch + 1:
            raise fail_with_reason(
                context,
                f"{app.name}: the trigger reported the cutover, the control record does not "
                f"show it ({rec.active.value if rec else None} active at epoch "
                f"{rec.epoch if rec else None})",
            )
        return self.cut(context, control, app, planned, rec)

    def plan_again(
        self, context: Any, control: BatonControlHook, app: AppDefinition, plan: HandoffPlan, attempt: int, why: str
    ) -> HandoffPlan | None:
        """A new fence, farther ahead, if the active passed this one and nothing else moved; else None."""
        plane, run = control.plane(), context["run_id"]
        rec = plane.require(app.name)
        if not fence_passed(rec, plan.epoch, plan.fence, run, control.last_commit(app)):
            return None
        ahead = float(self.ahead_s) * 2**attempt
        new = plan_ahead(control, app, rec, ahead, fence=True)
        try:
            rec = plane.update(app.name, moved_fence(plan.fence, new, plan.epoch, run))
        except HandoffError as exc:  # something else moved meanwhile: the gate's own failure stands
            self.log.warning("%s: not planning another fence: %s", app.name, exc)
            return None
        self.log.warning(
            "%s: %s; fence moved to %s (%g s ahead, fence %d of %d)",
            app.name,
            why,
            rec.fence,
            ahead,
            attempt + 1,
            MAX_CUTOVER_FENCES,
        )
        return plan_of(rec.handoff)

    def cut(
        self, context: Any, control: BatonControlHook, app: AppDefinition, plan: HandoffPlan, rec: ControlRecord
    ) -> dict[str, Any]:
        self.log.info(
            "%s: %s is active at epoch %s and emits from %s", app.name, rec.active.value, rec.epoch, plan.fence
        )
        # at_ms: when the new active took over (the settle check counts from here): the cutover's write
        at_ms = rec.ts_ms if rec.epoch == plan.epoch + 1 and rec.ts_ms else int(time.time() * 1000)
        # The app's output has a new producer from the fence on: its Asset's event (baton_airflow.assets).
        spec = rec.slots.get(rec.active)
        emit_handoff(
            context,
            output_asset(control.bootstrap, app.output.topic),
            {
                "app": app.name,
                "kind": "cutover",
                "epoch": plan.epoch + 1,
                "active": rec.active.value,
                "version": spec.version if spec is not None else "",
                "generation": spec.generation if spec is not None else 0,
                "fence": {str(p): o for p, o in sorted(plan.fence.items())},
                "corrected": str(self.correct).lower() == "true",
                "run_id": str(context.get("run_id", "")),
            },
        )
        return Cutover(epoch=plan.epoch + 1, active=rec.active, fence=plan.fence, at_ms=at_ms).to_xcom()


class AbortHandoffOperator(_HandoffOperator):
    """Runs when a step of `steps` failed (trigger rule one_failed): lift the fence if the role has not
    moved (the active keeps serving), then fail the run with the failed step's reason, so a run's state
    is its outcome (Airflow takes it from the leaf tasks: an abort that succeeded would show a handoff
    that did not happen as a successful run). A cutover this run did complete (a step failed after
    the write) is left alone and the abort succeeds: the handoff happened."""

    template_fields = ("app", "plan")

    def __init__(
        self, *, plan: Any, steps: Sequence[str] = ("fence", "cutover"), trigger_rule: str = "one_failed", **kwargs: Any
    ):
        super().__init__(trigger_rule=trigger_rule, **kwargs)
        self.plan, self.steps = plan, list(steps)

    def execute(self, context: Any) -> None:
        app, _ = resolve(self.app, "blue")
        plane = self.control().plane()
        run = context["run_id"]
        rec = plane.current(app.name)
        if rec is not None and (done := finished(rec, run)) is not None:
            self.log.info("%s: this run's cutover to %s happened at epoch %s", app.name, done.to.value, rec.epoch)
            return
        reason = first_reason(context, self.steps)
        if self.plan and rec is not None:
            rec = lift_own_fence(plane, rec, HandoffPlan.of(self.plan).epoch, run, self.log)
        where = f"{rec.active.value} stays active at epoch {rec.epoch}" if rec is not None else "nothing changed"
        raise fail_with_reason(context, f"{app.name}: handoff did not happen: {reason}; {where}")
