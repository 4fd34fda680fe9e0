"""The reprocess's steps (baton.reprocess has the request checks; baton.handoff the cutover).

A reprocess holds the app (ControlRecord.operation) from its validation to its end, so a second one
is refused; every step recognises its own earlier work when retried.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from baton.apps import AppDefinitionError, load_version, version_path
from baton.handoff import other
from baton.invariants import answer_to, answered, ask_invariants, violations_text
from baton.lifecycle import IllegalTransition
from baton.plans import ConfirmPlan, ReprocessPlan, SlotRestart
from baton.records import Slot, SlotSpec, SlotState
from baton.reprocess import (
    RequestRefused,
    Start,
    begin_operation,
    check_app_state,
    end_operation,
    parse_end,
    resolve_start,
)
from baton_airflow.hooks.spark import BatonSparkHook
from baton_airflow.operators.slots import resolve
from baton_airflow.operators.steps import (
    AbortStepsOperator,
    AppOperator,
    PlanStepOperator,
    fail_with_reason,
    first_reason,
    lift_own_fence,
)
from baton_airflow.triggers.base import met_or_raise
from baton_airflow.triggers.status import InvariantsAnswerTrigger, SlotRunningTrigger

HOLD_S = 6 * 3600  # a reprocess may hold the app this long; past it, another may start (a dead run)


class ReprocessRequestOperator(AppOperator):
    """Refuse a bad request before anything changes (unknown version, a module that cannot publish
    corrected output, a start beyond the log or in the future, a partition that does not exist, a
    slot not running, a handoff or another reprocess under way); else mark the reprocess under way
    and return its plan, start offsets resolved."""

    template_fields = ("app", "version", "start", "start_timestamp_ms", "start_offsets", "end")

    def __init__(
        self,
        *,
        version: str,
        start: str = "earliest",
        start_timestamp_ms: Any = None,
        start_offsets: Any = None,
        end: str = "handover",
        retries: int = 1,
        **kwargs: Any,
    ):
        super().__init__(retries=retries, **kwargs)
        self.version, self.start = version, start
        self.start_timestamp_ms, self.start_offsets, self.end = start_timestamp_ms, start_offsets, end

    def execute(self, context: Any) -> dict[str, Any]:
        app, _ = resolve(self.app, "blue")
        control, spark = self.hooks()
        plane = control.plane()
        operation = f"reprocess by {context['run_id']}"
        now_ms = plane.now_ms()
        rec = plane.current(app.name)
        try:
            new = load_version(app.name, str(self.version))
            definition = version_path(app.name, str(self.version))
            module = importlib.import_module(new.module)
            if not hasattr(module, "state_output"):
                raise RequestRefused(f"{new.module} has no state_output(state): it cannot publish corrected output")
            start = Start.parse(self.start, _none(self.start_timestamp_ms), _none(self.start_offsets))
            end = parse_end(self.end)
            if rec is None or rec.operation != operation:  # a retry of this run skips the checks it passed
                check_app_state(rec, now_ms)
            lows, ends = control.kafka.bounds(app.input.topic, range(app.input.partitions))
            offsets = resolve_start(
                start,
                app.input.partitions,
                lows,
                ends,
                now_ms,
                lambda ts: control.kafka.offsets_for_timestamp(app.input.topic, range(app.input.partitions), ts),
            )
            rec = plane.update(app.name, begin_operation(operation, now_ms + HOLD_S * 1000, now_ms))
        except (AppDefinitionError, RequestRefused, ImportError) as exc:
            raise fail_with_reason(context, f"reprocess of {app.name} refused: {exc}; nothing was changed") from None
        standby = other(rec.active)
        generation = max(spec.generation for spec in rec.slots.values()) + 1
        if (
            rec.slots[standby].version == new.version
            and rec.slots[standby].generation > rec.slots[rec.active].generation
        ):
            generation = rec.slots[standby].generation  # a retry: the new generation is already this one
        self.log.info(
            "%s: reprocess with %s from %s (%s) in %s as generation %s",
            app.name,
            new.version,
            offsets,
            start.kind,
            standby.value,
            generation,
        )
        return ReprocessPlan(
            app=app.name,
            version=new.version,
            definition=str(definition),
            operation=operation,
            active=rec.active,
            standby=standby,
            epoch=rec.epoch,
            from_version=rec.slots[standby].version or app.version,
            from_generation=rec.slots[standby].generation,
            generation=generation,
            start=start.kind,
            start_offsets=offsets,
            end=end,
        ).to_xcom()


def _none(value: Any) -> Any:
    return None if value in (None, "", "None") else value


class NewGenerationOperator(AppOperator):
    """Start the plan's new generation in the standby slot: stage it (its start-up beside the old one),
    stop the old one, keep its checkpoint (archived: a note beside it says when and why), start the new
    version with fresh state from the start offsets, wait until it runs. Follow mode keeps it at or
    behind what the active emitted. Subclasses change which slot (`slot_key` in the plan), what is
    done between stop and start (`prepare`) and where the slot starts reading (`starting_offsets`)."""

    template_fields = ("app", "plan")
    slot_key = "standby"
    plan_type: type[ReprocessPlan | ConfirmPlan] = ReprocessPlan

    def __init__(
        self,
        *,
        plan: Any,
        wait_timeout_s: float = 600.0,
        retries: int = 2,  # apache/airflow#71580
        **kwargs: Any,
    ):
        super().__init__(retries=retries, **kwargs)
        self.plan, self.wait_timeout_s = plan, wait_timeout_s

    def run_plan(self) -> ReprocessPlan | ConfirmPlan:
        return self.plan_type.of(self.plan)

    def why(self, context: Any) -> str:
        return f"reprocess generation {self.run_plan().generation} ({context['run_id']})"

    def prepare(self, spark: BatonSparkHook, app: str, slot: Slot, left: SlotSpec, why: str) -> None:
        """The slot is stopped, its previous generation `left` behind: keep that checkpoint."""
        self.slot_state(spark).archive_note(app, slot, left.generation, left.version, why)

    def starting_offsets(self) -> str:
        plan = self.run_plan()
        assert isinstance(plan, ReprocessPlan)  # a subclass with another plan type overrides this method
        return json.dumps({str(p): int(o) for p, o in plan.start_offsets.items()})

    def execute(self, context: Any) -> None:
        plan = self.run_plan()
        app, slot = resolve(self.app, getattr(plan, self.slot_key))
        generation = plan.generation
        control, spark = self.hooks()
        plane = control.plane()
        spec = plane.require(app.name).slots[slot]
        why = self.why(context)
        offsets = self.starting_offsets()
        try:
            if spec.generation != generation:
                if spec.desired is not SlotState.STOPPED:  # else a retry: stopped already
                    # Its start-up beside the old generation, promoted by ensure_started below
                    # (baton.launcher.stage): the stop's downtime without the JVM's start.
                    spark.stage(
                        plan.definition, slot, control.bootstrap, generation=generation, starting_offsets=offsets
                    )
                    plane.move_slot(app.name, slot, SlotState.STOPPING, reason=why)
                    spark.stop(app.name, slot, grace_s=60, self_stop_s=60, keep_staged=True)
                    plane.move_slot(app.name, slot, SlotState.STOPPED, reason=why)
                self.prepare(spark, app.name, slot, spec, why)
                spec = plane.move_slot(
                    app.name,
                    slot,
                    SlotState.STARTING,
                    version=plan.version,
                    reason=why,
                    generation=generation,
                    started_ms=plane.now_ms(),
                ).slots[slot]
            elif spec.desired is not SlotState.RUNNING:
                spec = plane.move_slot(app.name, slot, SlotState.STARTING, reason=why).slots[slot]
        except IllegalTransition as exc:
            spark.discard_staged(app.name, slot)
            raise fail_with_reason(context, f"{app.name}/{slot.value}: {exc}") from None
        proc = spark.ensure_started(
            plan.definition, slot, control.bootstrap, generation=generation, starting_offsets=offsets
        )
        self.log.info(
            "%s/%s: generation %s (%s) from %s, pid %s",
            app.name,
            slot.value,
            generation,
            plan.version,
            offsets,
            proc.pid,
        )
        self.defer(
            trigger=SlotRunningTrigger(
                app=app.name,
                slot=slot.value,
                bootstrap=control.bootstrap,
                since_ms=int(proc.launched_at * 1000),
                timeout_s=self.wait_timeout_s,
            ),
            method_name="execute_complete",
            kwargs={"launch": BatonSparkHook.describe(proc), "since_ms": int(proc.launched_at * 1000)},
        )

    def execute_complete(self, context: Any, event: dict[str, Any], launch: dict[str, Any], since_ms: int) -> dict:
        plan = self.run_plan()
        app, slot = resolve(self.app, getattr(plan, self.slot_key))
        met_or_raise(
            context,
            event,
            lead=f"{slot.value} did not start on generation {plan.generation}",
            detail=f"driver log: {launch.get('log')}",
        )
        control, _ = self.hooks()
        control.plane().move_slot(app.name, slot, SlotState.RUNNING, reason="")
        return SlotRestart(
            slot=slot, since_ms=since_ms, launch=launch, version=plan.version, generation=plan.generation
        ).to_xcom()


class InvariantsOperator(AppOperator):
    """The app's own checks (its module's check_state) on the new generation's state, run by the slot that
    holds it (the standby) when asked through the control record (baton.invariants): no Spark
    application of its own beside both slots. Each try asks anew (its run and try are the request); the
    wait for the answer is deferred to the triggerer (no worker slot held while the standby reads)."""

    template_fields = ("app", "plan")

    # An unreadable state or no answer is retried; apache/airflow#71580 (retries=2).
    def __init__(self, *, plan: Any, timeout_s: float = 600.0, poll_s: float = 2.0, retries: int = 2, **kwargs: Any):
        super().__init__(retries=retries, **kwargs)
        self.plan, self.timeout_s, self.poll_s = plan, timeout_s, poll_s

    def execute(self, context: Any) -> None:
        plan = ReprocessPlan.of(self.plan)
        app, slot = resolve(self.app, plan.standby)
        control, _ = self.hooks()
        asked = f"{context['run_id']}:{context['ti'].try_number}"
        control.plane().update(app.name, ask_invariants(asked))
        self.log.info(
            "asked %s (generation %d) to check the app's invariants on its state (request %s)",
            slot.value,
            plan.generation,
            asked,
        )
        self.defer(
            trigger=InvariantsAnswerTrigger(
                app=app.name,
                slot=slot.value,
                bootstrap=control.bootstrap,
                asked=asked,
                generation=plan.generation,
                timeout_s=self.timeout_s,
                poll_s=self.poll_s,
            ),
            method_name="execute_complete",
            kwargs={"asked": asked},
        )

    def execute_complete(self, context: Any, event: dict[str, Any], asked: str) -> dict[str, Any]:
        plan = ReprocessPlan.of(self.plan)
        app, slot = resolve(self.app, plan.standby)
        met_or_raise(
            context,
            event,
            lead=f"{app.name}/{slot.value} (generation {plan.generation}) did not answer the invariant check",
            detail="is it running? (baton_health restarts a dead slot; its driver.log says why it stopped)",
        )
        control, _ = self.hooks()
        answer = answer_to(control.status(app.name, slot, last_n=500), asked, plan.generation)
        if answer is None:  # answered, then out of the last 500 records: cannot be told apart from no answer
            raise AirflowException(
                f"the answer to the invariant check {asked} is no longer in "
                f"{app.name}/{slot.value}'s recent status: a retry asks again"
            )
        try:
            control.plane().update(app.name, answered(asked))
        except Exception as exc:  # noqa: BLE001 - a request left is cleared by the cutover; at worst answered again
            self.log.warning("the answered invariant check %s stays asked: %s", asked, exc)
        if answer.unchecked:  # the state could not be read (the running slot moved files): a retry asks again
            raise AirflowException(f"the invariant check could not read the state: {answer.error}")
        if not answer.ok:
            detail = answer.error or violations_text(answer)
            raise fail_with_reason(context, f"generation {plan.generation} breaks the app's invariants: {detail}")
        result = answer.to_json()
        self.log.info("invariants hold: %s", result)
        return result


class HandoverGateOperator(PlanStepOperator):
    """end=handover: go on to the fence and the corrected-output cutover. end=standby: skip them, and
    everything after them (the run's staged end is finish_staged)."""

    def execute(self, context: Any) -> None:
        end = ReprocessPlan.of(self.plan).end
        if end != "handover":
            raise AirflowSkipException(f"end={end}: no handover in this run")


class FinishStagedOperator(PlanStepOperator):
    """end=standby: the new generation has caught up and passed its checks in the standby slot, and
    stays there, hot, following the live active (which still runs the previous generation). The app
    is free again. Next: hand over with baton_cutover {"correct": true} (corrected output), or drop
    the new generation with baton_reprocess_confirm (the standby rebuilt on the live generation)."""

    def execute(self, context: Any) -> dict[str, Any]:
        plan = ReprocessPlan.of(self.plan)
        if plan.end != "standby":
            raise AirflowSkipException("end=handover: the run ends with its handover (finish)")
        app, _ = resolve(self.app, "blue")
        control, _ = self.hooks()
        rec = control.plane().update(app.name, end_operation(plan.operation))
        staged = plan.standby
        summary = {
            "active": rec.active.value,
            "epoch": rec.epoch,
            "staged": {
                "slot": staged.value,
                "version": rec.slots[staged].version,
                "generation": rec.slots[staged].generation,
            },
            "hand_over": {"dag": "baton_cutover", "conf": {"app": app.name, "correct": True}},
            "drop": {"dag": "baton_reprocess_confirm", "conf": {"app": app.name}},
        }
        self.log.info("reprocess staged: %s", summary)
        return summary


class FinishReprocessOperator(PlanStepOperator):
    """The new generation is active and settled: the reprocess is over (the app is free again). The
    previous generation stays hot in the other slot: the way back is baton_cutover with correct=true,
    until baton_reprocess_confirm rebuilds that slot on the new generation."""

    def execute(self, context: Any) -> dict[str, Any]:
        app, _ = resolve(self.app, "blue")
        control, spark = self.hooks()
        plan = ReprocessPlan.of(self.plan)
        rec = control.plane().update(app.name, end_operation(plan.operation))
        old = plan.active
        summary = {
            "active": rec.active.value,
            "epoch": rec.epoch,
            "generation": plan.generation,
            "version": plan.version,
            "previous": {"slot": old.value, "version": rec.slots[old].version, "generation": rec.slots[old].generation},
            "archived": str(self.slot_state(spark).checkpoint(app.name, plan.standby, plan.from_generation).parent),
            "way_back": {"dag": "baton_cutover", "conf": {"app": app.name, "correct": True}},
            "confirm": {"dag": "baton_reprocess_confirm", "conf": {"app": app.name}},
        }
        self.log.info("reprocess done: %s", summary)
        return summary


class AbortReprocessOperator(AbortStepsOperator):
    """A gate before the cutover failed: lift the fence if one is set at the plan's epoch, put the
    standby back on its previous generation (its archived checkpoint), free the app, and fail the run
    with the failed step's reason. The active was never touched."""

    def execute(self, context: Any) -> None:
        from airflow.sdk.exceptions import AirflowFailException

        reason = first_reason(context, self.steps)
        app, _ = resolve(self.app, "blue")
        if not self.plan:  # refused at validation: nothing changed
            raise AirflowFailException(reason)
        control, spark = self.hooks()
        plane = control.plane()
        plan = ReprocessPlan.of(self.plan)
        rec = lift_own_fence(plane, plane.require(app.name), plan.epoch, context["run_id"], self.log)
        standby = plan.standby
        back = ""
        if rec.active is not standby and rec.slots[standby].generation != plan.from_generation:
            gen, version = plan.from_generation, plan.from_version
            plane.move_slot(app.name, standby, SlotState.STOPPING, reason=f"reprocess aborted: {reason}"[:500])
            spark.stop(app.name, standby, grace_s=60, self_stop_s=60)
            plane.move_slot(app.name, standby, SlotState.STOPPED, reason="reprocess aborted")
            plane.move_slot(
                app.name,
                standby,
                SlotState.STARTING,
                version=version,
                generation=gen,
                reason="back on its generation after an aborted reprocess",
                started_ms=plane.now_ms(),
            )
            spark.ensure_started(str(version_path(app.name, version)), standby, control.bootstrap, generation=gen)
            back = f"; {standby.value} restarted on generation {gen} ({version})"
        plane.update(app.name, end_operation(plan.operation))
        raise AirflowFailException(
            f"{app.name}: reprocess aborted before the cutover: {reason}; {rec.active.value} stays active{back}"
        )
