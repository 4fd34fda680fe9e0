"""Operators that move one slot through its lifecycle. Each records its intent in the control topic
before acting, observes the result in the status topic, and converges when re-run (a retried task
reattaches to the launch it started instead of starting a second copy: baton.launcher)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from baton.apps import AppDefinition, AppDefinitionError, load_app, version_path
from baton.lifecycle import IllegalTransition
from baton.records import Slot, SlotState
from baton_airflow.hooks.control import BatonControlHook
from baton_airflow.hooks.kafka import BatonKafkaHook
from baton_airflow.hooks.spark import BatonSparkHook
from baton_airflow.triggers.base import met_or_raise
from baton_airflow.triggers.status import SlotRunningTrigger


def resolve(app: str, slot: str) -> tuple[AppDefinition, Slot]:
    """The app and slot named by a task's arguments; bad ones fail the task without retries."""
    try:
        definition = load_app(app)
    except AppDefinitionError as exc:
        raise AirflowFailException(str(exc)) from None
    try:
        return definition, Slot(slot)
    except ValueError:
        raise AirflowFailException(f"slot {slot!r} is not one of {[s.value for s in Slot]}") from None


class _SlotOperator(BaseOperator):
    """Defaults of BaseOperator's arguments (retries, retry_delay, trigger_rule) are declared in the
    signatures of Baton's operators, never set in `__init__`'s body: Airflow reads a mapped task's
    (`.partial().expand()`) defaults from the signature, so a body's default never reached the scheduler
    and baton_lifecycle's start ran without the retries apache/airflow#71580 needs."""

    template_fields = ("app", "slot")

    def __init__(
        self,
        *,
        app: str,
        slot: str,
        kafka_conn_id: str = BatonKafkaHook.default_conn_name,
        spark_conn_id: str = BatonSparkHook.default_conn_name,
        retry_delay: timedelta = timedelta(seconds=10),
        **kwargs: Any,
    ):
        super().__init__(retry_delay=retry_delay, **kwargs)
        self.app, self.slot = app, slot
        self.kafka_conn_id, self.spark_conn_id = kafka_conn_id, spark_conn_id

    def hooks(self) -> tuple[BatonControlHook, BatonSparkHook]:
        return BatonControlHook(self.kafka_conn_id), BatonSparkHook(conn_id=self.spark_conn_id)


class EnsureSlotRunningOperator(_SlotOperator):
    """Start the slot unless it runs; wait (deferred) until its process reports RUNNING."""

    # apache/airflow#71580: a deferred task can end "success but queued" (retries=2)
    def __init__(self, *, wait_timeout_s: float = 600.0, retries: int = 2, **kwargs: Any):
        super().__init__(retries=retries, **kwargs)
        self.wait_timeout_s = wait_timeout_s

    def execute(self, context: Any) -> None:
        app, slot = resolve(self.app, self.slot)
        control, spark = self.hooks()
        plane = control.plane()
        current = plane.current(app.name)
        spec = current.slots.get(slot) if current else None
        alive = spark.find(app.name, slot)
        # The version the control record says this slot runs (a rolling upgrade moves it), else the registry's.
        version = spec.version if spec is not None and spec.version else app.version
        try:
            definition = str(version_path(app.name, version))
        except AppDefinitionError as exc:
            raise AirflowFailException(str(exc)) from None
        if alive is None or spec is None or spec.desired not in (SlotState.STARTING, SlotState.RUNNING):
            # Intent first. Starting a FAILED slot is the operator's explicit decision: the crash-loop
            # guard's count starts again.
            fields: dict[str, Any] = {"restarts": ()} if spec is not None and spec.desired is SlotState.FAILED else {}
            try:
                plane.move_slot(
                    app.name,
                    slot,
                    SlotState.STARTING,
                    version=version,
                    reason=f"start requested by {context['run_id']}",
                    **fields,
                )
            except IllegalTransition as exc:
                raise AirflowFailException(f"{app.name}/{slot.value}: {exc}") from None
        generation = spec.generation if spec is not None else 0
        proc = spark.ensure_started(definition, slot, control.bootstrap, generation=generation)
        self.log.info(
            "%s/%s launch %s (pid %s, log %s); waiting for RUNNING",
            app.name,
            slot.value,
            proc.launch_id,
            proc.pid,
            proc.log_path,
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
            kwargs={"launch": BatonSparkHook.describe(proc)},
        )

    def execute_complete(self, context: Any, event: dict[str, Any], launch: dict[str, Any]) -> dict[str, Any]:
        app, slot = resolve(self.app, self.slot)
        # Not met: the reason goes to XCom "reason" (the REST API and the UI show it); a slot that failed
        # fails the task for good (retrying the wait cannot help), a timeout is retried.
        message = met_or_raise(context, event, detail=f"driver log: {launch.get('log')}")
        control, _ = self.hooks()
        control.plane().move_slot(app.name, slot, SlotState.RUNNING, reason="")
        self.log.info("%s", message)
        return {**launch, "message": message}


class StopSlotOperator(_SlotOperator):
    """Stop the slot gracefully: the control-topic request (the slot ends by itself at a batch
    boundary within `self_stop_s`), then SIGTERM, then kill after `grace_s`."""

    def __init__(self, *, grace_s: float = 60.0, self_stop_s: float = 60.0, retries: int = 1, **kwargs: Any):
        super().__init__(retries=retries, **kwargs)
        self.grace_s, self.self_stop_s = grace_s, self_stop_s

    def execute(self, context: Any) -> dict[str, Any]:
        app, slot = resolve(self.app, self.slot)
        control, spark = self.hooks()
        plane = control.plane()
        current = plane.current(app.name)
        spec = current.slots.get(slot) if current else None
        if spec is not None and spec.desired is not SlotState.STOPPED:
            try:
                plane.move_slot(app.name, slot, SlotState.STOPPING, reason=f"stop requested by {context['run_id']}")
            except IllegalTransition as exc:
                raise AirflowFailException(f"{app.name}/{slot.value}: {exc}") from None
        result = spark.stop(app.name, slot, self.grace_s, self.self_stop_s)
        if spec is not None and spec.desired is not SlotState.STOPPED:
            plane.move_slot(app.name, slot, SlotState.STOPPED, reason=f"stopped by {context['run_id']}")
        exit_code = result.exit.code if result.exit else None
        self.log.info(
            "%s/%s: %s (graceful: %s, exit code %s)",
            app.name,
            slot.value,
            "stopped" if result.was_running else "was not running",
            result.graceful,
            exit_code,
        )
        return {
            "app": app.name,
            "slot": slot.value,
            "was_running": result.was_running,
            "graceful": result.graceful,
            "exit_code": exit_code,
        }
