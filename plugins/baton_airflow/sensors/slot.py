"""Deferrable gates on what slots report: each defers at once to its wait's trigger
(baton_airflow.triggers), so a long wait holds no worker slot, and fails with the trigger's reason when
the condition fails or times out."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from baton.apps import load_app
from baton.kafka.control_log import read_control
from baton.plans import Cutover, SlotRestart, StateCheckPlan
from baton.upgrade import CORRECTION_GRACE_S, settle_batch_limit, settle_lag_limit, settle_record_cost
from baton_airflow.hooks.kafka import BatonKafkaHook
from baton_airflow.triggers.base import SlotWaitTrigger, met_or_raise
from baton_airflow.triggers.status import PositionReachedTrigger, SlotHealthyTrigger, SlotRunningTrigger, WarmUpTrigger
from baton_airflow.triggers.upgrade import RestoreTrigger, SettleTrigger, StateCheckTrigger


class _SlotSensor(BaseSensorOperator):
    """A gate on a slot's status records, on the sensor API: deferred by default (the wait holds no
    worker slot), or `deferrable=False` to poke in `mode` "poke" or "reschedule" every
    `poke_interval`. The wait's limit is `wait_timeout_s`, else the sensor's own `timeout`; either
    way the same check decides (the trigger's check), and a failed one fails the task with its
    reason (XCom "reason", for an abort or rollback step)."""

    template_fields: Sequence[str] = ("app", "slot", "wait_timeout_s")

    def __init__(
        self,
        *,
        app: str,
        slot: str,
        wait_timeout_s: float | str | None = 600.0,
        deferrable: bool = True,
        kafka_conn_id: str = BatonKafkaHook.default_conn_name,
        retry_delay: timedelta = timedelta(seconds=10),
        retries: int = 2,
        **kwargs: Any,
    ):
        # retries: apache/airflow#71580, a deferred task can end "success but queued"
        super().__init__(retry_delay=retry_delay, retries=retries, **kwargs)
        self.app, self.slot, self.wait_timeout_s, self.kafka_conn_id = app, slot, wait_timeout_s, kafka_conn_id
        self.deferrable = deferrable
        self._poking: SlotWaitTrigger | None = None  # poke mode: one check across pokes (a moved state check)

    trigger_class: type[SlotWaitTrigger] = SlotWaitTrigger

    def trigger_args(self, context: Any) -> dict[str, Any]:
        """The wait's own arguments (trigger_class's)."""
        return {}

    def wait_s(self) -> float:
        """How long the wait may take: wait_timeout_s, else the sensor API's timeout."""
        return (
            float(self.wait_timeout_s)
            if self.wait_timeout_s is not None and self.wait_timeout_s != ""
            else float(self.timeout)
        )

    def status_trigger(self, context: Any) -> SlotWaitTrigger:
        app = load_app(self.app)
        return self.trigger_class(
            app=app.name,
            slot=self.slot,
            bootstrap=BatonKafkaHook(self.kafka_conn_id).bootstrap,
            timeout_s=self.wait_s(),
            **self.trigger_args(context),
        )

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            self.timeout = self.wait_s()
            return super().execute(context)  # pokes until met, failed (raised) or timed out
        self.defer(trigger=self.status_trigger(context), method_name="execute_complete")

    def poke(self, context: Any) -> bool:
        """One check (deferrable=False): met -> True, not yet -> False, failed -> the task fails with why."""
        if self._poking is None:
            self._poking = self.status_trigger(context)
        result = self._poking.check()
        if result.failed:
            context["ti"].xcom_push(key="reason", value=result.message)
            raise AirflowFailException(result.message)
        if not result.met:
            self.log.info("%s/%s: waiting: %s", self.app, self.slot, result.message)
        return bool(result.met)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> str:
        message = met_or_raise(context, event)
        self.log.info("%s", message)
        return message


class SlotRunningSensor(_SlotSensor):
    """The slot's process (launched at or after `since_ms`) reports RUNNING with a completed batch."""

    trigger_class = SlotRunningTrigger

    template_fields = (*_SlotSensor.template_fields, "since_ms", "pid")

    def __init__(self, *, since_ms: int | str = 0, pid: int | str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.since_ms, self.pid = since_ms, pid

    def trigger_args(self, context: Any) -> dict[str, Any]:
        return dict(
            since_ms=int(self.since_ms or 0),
            pid=int(self.pid) if self.pid is not None and self.pid not in ("", "None") else None,
        )


class PositionReachedSensor(_SlotSensor):
    """The slot has processed at least `target` ({partition: offset}) on every partition."""

    trigger_class = PositionReachedTrigger

    template_fields = (*_SlotSensor.template_fields, "target")

    def __init__(self, *, target: dict[str, int], **kwargs: Any):
        super().__init__(**kwargs)
        self.target = target

    def trigger_args(self, context: Any) -> dict[str, Any]:
        return dict(target={str(p): int(o) for p, o in self.target.items()})


class LagWithinSensor(_SlotSensor):
    """The warm-up gate: the slot (a standby, or a new generation catching up) is within `max_lag`
    records (default: the app's budget) and, if `max_lag_s` is given, that many seconds of input of
    what the active has emitted, beyond what the app's standby pace holds it back by
    (baton.conditions.following). Only status records since `since_ms` count: after a restart, the
    previous launch's records say nothing of the new one. `restart` (the XCom of the step that
    restarted the slot, a SlotRestart) gives both the slot and since_ms."""

    trigger_class = WarmUpTrigger

    template_fields = (*_SlotSensor.template_fields, "max_lag", "max_lag_s", "since_ms", "restart")

    def __init__(
        self,
        *,
        max_lag: int | str | None = None,
        max_lag_s: float | str | None = None,
        since_ms: int | str = 0,
        restart: Any = None,
        **kwargs: Any,
    ):
        kwargs.setdefault("slot", "")
        super().__init__(**kwargs)
        self.max_lag, self.max_lag_s, self.since_ms, self.restart = max_lag, max_lag_s, since_ms, restart

    def execute(self, context: Any) -> None:
        if self.restart is not None:
            restart = SlotRestart.of(self.restart)
            self.slot, self.since_ms = restart.slot.value, restart.since_ms
        super().execute(context)

    def trigger_args(self, context: Any) -> dict[str, Any]:
        app = load_app(self.app)
        return dict(
            max_lag=int(self.max_lag) if self.max_lag is not None and self.max_lag != "" else app.max_lag_records,
            max_lag_s=float(self.max_lag_s) if self.max_lag_s is not None and self.max_lag_s != "" else None,
            since_ms=int(self.since_ms or 0),
        )


class SlotHealthySensor(_SlotSensor):
    """The slot passes the health DAG's rules now (heartbeat age, progress while input waits, batch
    time, state budgets, dead letters). Fails at once if it is dead, failed or not desired running."""

    trigger_class = SlotHealthyTrigger


class RestoreCheckSensor(_SlotSensor):
    """The slot restarted by an UpgradeSlotOperator restored exactly the state it left at its stop
    (row count and digest). `upgrade` is that operator's XCom; the slot is taken from it."""

    trigger_class = RestoreTrigger

    template_fields = ("app", "upgrade", "wait_timeout_s")

    def __init__(self, *, upgrade: Any, **kwargs: Any):
        kwargs.setdefault("slot", "")
        super().__init__(**kwargs)
        self.upgrade = upgrade

    def execute(self, context: Any) -> None:
        self.slot, self.wait_timeout_s = SlotRestart.of(self.upgrade).slot.value, self.wait_s()
        super().execute(context)

    def trigger_args(self, context: Any) -> dict[str, Any]:
        restart = SlotRestart.of(self.upgrade)
        return dict(since_ms=restart.since_ms, expected=restart.left)


class StatesAgreeSensor(_SlotSensor):
    """Both slots' state digests at the check position agree under `policy` (baton.upgrade); a
    position a slot read past is asked again further ahead (StateCheckTrigger).
    `check` is the StateCheckPositionOperator's XCom (position, standby, ahead_s)."""

    trigger_class = StateCheckTrigger

    template_fields = ("app", "check", "policy", "wait_timeout_s")

    def __init__(self, *, check: Any, policy: str = "exact", **kwargs: Any):
        kwargs.setdefault("slot", "")
        super().__init__(**kwargs)
        self.check, self.policy = check, policy

    def execute(self, context: Any) -> None:
        self.slot, self.wait_timeout_s = StateCheckPlan.of(self.check).standby.value, self.wait_s()
        super().execute(context)

    def trigger_args(self, context: Any) -> dict[str, Any]:
        # The position asked now: a try before this one may have moved it further ahead (a slot had read
        # past the first); the check step's own position otherwise.
        plan = StateCheckPlan.of(self.check)
        rec = read_control(BatonKafkaHook(self.kafka_conn_id).bootstrap, load_app(self.app).name)
        position = rec.check_at if rec is not None and rec.check_at is not None else plan.position
        return dict(target=position, policy=str(self.policy), ahead_s=plan.ahead_s)


class SettleSensor(_SlotSensor):
    """The new active keeps the SLA for `settle_s` after the cutover: alive, every batch within
    `max_batch_ms` (0: the app's batch budget, or the old active's recent batch time if that was longer:
    baton.upgrade.settle_batch_limit; and then a batch that cost no more per record than the old
    active's is excused: baton.upgrade.settle_record_cost), output flowing, lag within the app's budget beyond the old
    active's recent lag at the end (baton.upgrade.settle_lag_limit).
    Fails at the first breach (a rollback follows). `cutover` is the CutoverOperator's XCom. `correct`:
    the cutover asked for corrected output, which must be in, and the period counts from when it went in
    (baton.upgrade.settle_check)."""

    trigger_class = SettleTrigger

    template_fields = ("app", "cutover", "settle_s", "max_batch_ms")

    def __init__(
        self,
        *,
        cutover: Any,
        settle_s: float | str = 30.0,
        max_batch_ms: int | str = 0,
        correct: bool = False,
        **kwargs: Any,
    ):
        kwargs.setdefault("slot", "")
        super().__init__(**kwargs)
        self.cutover, self.settle_s, self.max_batch_ms, self.correct = cutover, settle_s, max_batch_ms, correct

    def execute(self, context: Any) -> None:
        self.slot = Cutover.of(self.cutover).active.value
        # A corrected output may go in up to settle_s + CORRECTION_GRACE_S after the cutover, and the
        # period counts from there: a minute beyond both.
        self.wait_timeout_s = 2 * float(self.settle_s) + CORRECTION_GRACE_S + 60.0
        super().execute(context)

    def trigger_args(self, context: Any) -> dict[str, Any]:
        from baton_airflow.hooks.control import read_slot_status

        app = load_app(self.app)
        cutover = Cutover.of(self.cutover)
        # The defaults follow the old version: the budgets, or its own pace and lag when a busy host held
        # it past them (a rollback to a version as slow helps nobody).
        old_active = read_slot_status(
            BatonKafkaHook(self.kafka_conn_id).bootstrap, app.name, cutover.active.other.value
        )
        limit, why = int(self.max_batch_ms), "as asked"
        cost, cost_why = None, "none: the limit was asked for"
        if not limit:
            limit, why = settle_batch_limit(old_active, cutover.at_ms, app.batch_ms_budget)
            cost, cost_why = settle_record_cost(old_active, cutover.at_ms)
        max_lag, lag_why = settle_lag_limit(old_active, cutover.at_ms, app.max_lag_records)
        self.log.info(
            "%s settle: batch-time limit %d ms, %s; excused per record at most: %s; lag limit %d records, %s",
            app.name,
            limit,
            why,
            cost_why,
            max_lag,
            lag_why,
        )
        return dict(
            since_ms=cutover.at_ms,
            epoch=cutover.epoch,
            fence=cutover.fence,
            settle_s=float(self.settle_s),
            max_batch_ms=limit,
            max_lag=max_lag,
            correct=bool(self.correct),
            record_cost_us=cost,
            poll_s=1.0,
        )
