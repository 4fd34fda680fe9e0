"""The steps that end a reprocess (baton.generations has the plan and the archive): keep the active's
generation, rebuild the other slot on it from a copy of the active's checkpoint, archive what no slot
runs any more, delete archives past their retention.

The run holds the app (ControlRecord.operation) from its validation to its end; every step
recognises its own earlier work when retried.
"""

from __future__ import annotations

import time
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from baton.apps import AppDefinitionError, version_path
from baton.generations import plan_confirmation
from baton.plans import ConfirmPlan
from baton.records import Slot, SlotSpec
from baton.reprocess import RequestRefused, begin_operation, end_operation
from baton_airflow.hooks.spark import BatonSparkHook
from baton_airflow.operators.reprocess import NewGenerationOperator
from baton_airflow.operators.slots import resolve
from baton_airflow.operators.steps import (
    AbortStepsOperator,
    AppOperator,
    PlanStepOperator,
    fail_with_reason,
    first_reason,
)

HOLD_S = 3600  # a confirmation may hold the app this long; past it, another operation may start
DAY_MS = 86_400_000


class ConfirmRequestOperator(AppOperator):
    """Refuse a confirmation that cannot run (both slots on one generation, a slot not running, a
    handoff or another operation under way), else hold the app and return the plan."""

    template_fields = ("app", "retention_days")

    def __init__(self, *, retention_days: Any = 7, retries: int = 1, **kwargs: Any):
        super().__init__(retries=retries, **kwargs)
        self.retention_days = retention_days

    def execute(self, context: Any) -> dict[str, Any]:
        app, _ = resolve(self.app, "blue")
        control, _ = self.hooks()
        plane = control.plane()
        operation = f"confirm by {context['run_id']}"
        now_ms = plane.now_ms()
        rec = plane.current(app.name)
        try:
            days = float(self.retention_days)
            if not days >= 0:
                raise RequestRefused(f"retention_days must be >= 0, got {self.retention_days!r}")
            confirmation = plan_confirmation(rec, now_ms, held_by=operation)  # a retry: this run holds the app
            definition = version_path(app.name, confirmation.version)
            rec = plane.update(app.name, begin_operation(operation, now_ms + HOLD_S * 1000, now_ms))
        except (AppDefinitionError, RequestRefused, ValueError) as exc:
            raise fail_with_reason(context, f"confirmation of {app.name} refused: {exc}; nothing was changed") from None
        plan = ConfirmPlan(
            app=app.name,
            operation=operation,
            epoch=rec.epoch,
            keep=confirmation.keep,
            rebuild=confirmation.rebuild,
            generation=confirmation.generation,
            version=confirmation.version,
            definition=str(definition),
            drop_generation=confirmation.drop_generation,
            drop_version=confirmation.drop_version,
            discards_reprocess=confirmation.discards_reprocess,
            keep_until_ms=now_ms + int(days * DAY_MS),
        )
        self.log.info(
            "%s: %s keeps generation %s (%s); %s moves from generation %s onto it%s",
            app.name,
            confirmation.keep.value,
            confirmation.generation,
            confirmation.version,
            confirmation.rebuild.value,
            confirmation.drop_generation,
            " (the reprocess is discarded: the way back was taken)" if confirmation.discards_reprocess else "",
        )
        return plan.to_xcom()


class RebuildStandbyOperator(NewGenerationOperator):
    """Stop the slot to rebuild, archive its generation, start it on the kept generation from a copy of
    the active's checkpoint (its last committed batch; it follows the active from there), and wait
    until it runs."""

    slot_key = "rebuild"
    plan_type = ConfirmPlan

    def why(self, context: Any) -> str:
        return f"confirmation of generation {self.run_plan().generation} ({context['run_id']})"

    def prepare(self, spark: BatonSparkHook, app: str, slot: Slot, left: SlotSpec, why: str) -> None:
        plan, state = ConfirmPlan.of(self.plan), self.slot_state(spark)
        generation, now_ms = plan.generation, int(time.time() * 1000)
        for gen, version in ((left.generation, left.version), (generation, "")):
            # Its own generation; and whatever an earlier reprocess left at the path the copy goes to.
            state.archive_generation(app, slot, gen, why, plan.keep_until_ms, now_ms, version=version)
        target = state.checkpoint(app, slot, generation)
        source = state.checkpoint(app, plan.keep, generation)
        batch = state.copy_checkpoint(source, target)  # cut after its last batch: never ahead of the active
        self.log.info("%s/%s: copied %s at batch %s", app, slot.value, source, batch)

    def starting_offsets(self) -> str:
        return "earliest"  # the copied checkpoint says where it stands


class FinishConfirmOperator(PlanStepOperator):
    """The rebuilt slot follows the active: archive every generation no slot runs, delete archives
    past their retention, free the app."""

    def execute(self, context: Any) -> dict[str, Any]:
        app, _ = resolve(self.app, "blue")
        control, spark = self.hooks()
        plane = control.plane()
        now_ms = plane.now_ms()
        rec, plan = plane.require(app.name), ConfirmPlan.of(self.plan)
        state = self.slot_state(spark)
        archived = state.archive_unused(rec, f"unused after {context['run_id']}", plan.keep_until_ms, now_ms)
        purged = state.purge_expired(app.name, now_ms)
        rec = plane.update(app.name, end_operation(plan.operation))
        summary = {
            "active": rec.active.value,
            "generation": plan.generation,
            "version": plan.version,
            "standby": {"slot": plan.rebuild.value, "generation": rec.slots[plan.rebuild].generation},
            "discarded_reprocess": plan.discards_reprocess,
            "archived": [str(p) for p in archived],
            "purged": [str(p) for p in purged],
        }
        self.log.info("confirmed: %s", summary)
        return summary


class AbortConfirmOperator(AbortStepsOperator):
    """A step failed: free the app and fail the run with the step's reason. The active was never
    touched; a rebuilt slot that did not start is left STARTING for the health DAG's restarts, and its
    previous generation stays in the archive."""

    def execute(self, context: Any) -> None:
        reason = first_reason(context, self.steps)
        if not self.plan:
            raise AirflowFailException(reason)
        app, _ = resolve(self.app, "blue")
        control, _ = self.hooks()
        plan = ConfirmPlan.of(self.plan)
        control.plane().update(app.name, end_operation(plan.operation))
        raise AirflowFailException(f"{app.name}: confirmation aborted: {reason}; {plan.keep.value} stays active")
