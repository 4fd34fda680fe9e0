"""What the multi-step DAGs' operators share (rolling upgrade, reprocess): hooks for one app, a failed
step's reason kept for the abort step's report, lifting only this run's fence. A slot's checkpoint and
its copies are the slot-state hook's (baton_airflow.hooks.slot_state)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from baton.handoff import HandoffError, without_fence
from baton.records import ControlRecord
from baton_airflow.hooks.control import BatonControlHook
from baton_airflow.hooks.kafka import BatonKafkaHook
from baton_airflow.hooks.slot_state import BatonSlotStateHook
from baton_airflow.hooks.spark import BatonSparkHook


class AppOperator(BaseOperator):
    template_fields: Sequence[str] = ("app",)

    def __init__(
        self,
        *,
        app: str,
        kafka_conn_id: str = BatonKafkaHook.default_conn_name,
        spark_conn_id: str = BatonSparkHook.default_conn_name,
        retry_delay: timedelta = timedelta(seconds=5),
        **kwargs: Any,
    ):
        super().__init__(retry_delay=retry_delay, **kwargs)
        self.app, self.kafka_conn_id, self.spark_conn_id = app, kafka_conn_id, spark_conn_id

    def hooks(self) -> tuple[BatonControlHook, BatonSparkHook]:
        return BatonControlHook(self.kafka_conn_id), BatonSparkHook(conn_id=self.spark_conn_id)

    @staticmethod
    def slot_state(spark: BatonSparkHook) -> BatonSlotStateHook:
        """The files of the slots `spark` launches (checkpoints and their copies)."""
        return BatonSlotStateHook.of(spark)


class PlanStepOperator(AppOperator):
    """A step that works from the run's plan (its first step's XCom); retried: each recognises its
    own earlier work."""

    template_fields = ("app", "plan")

    def __init__(self, *, plan: Any, retries: int = 2, **kwargs: Any):
        super().__init__(retries=retries, **kwargs)
        self.plan = plan


class AbortStepsOperator(PlanStepOperator):
    """Runs when one of `steps` failed (trigger rule one_failed): undoes what the run set up and fails
    the run with the failed step's reason (first_reason). `plan` is the run's first step's XCom."""

    def __init__(self, *, plan: Any, steps: list[str], trigger_rule: str = "one_failed", **kwargs: Any):
        super().__init__(plan=plan, trigger_rule=trigger_rule, **kwargs)
        self.steps = steps


def fail_with_reason(context: Any, message: str) -> AirflowFailException:
    """A failed step's reason, kept for the abort step's report, as the exception to raise."""
    context["ti"].xcom_push(key="reason", value=message)
    return AirflowFailException(message)


def first_reason(context: Any, steps: Sequence[str]) -> str:
    """The reason the first failed step of `steps` gave (fail_with_reason, or a sensor's)."""
    for step in steps:
        if reason := context["ti"].xcom_pull(task_ids=step, key="reason"):
            return reason
    return f"a step failed without a reason (see the logs of {', '.join(steps)})"


def lift_own_fence(plane, rec: ControlRecord, epoch: int, run_id: str, log) -> ControlRecord:
    """Lift the fence this run set at `epoch`, if it is still there; another handoff's is left alone."""
    if rec.epoch != epoch or rec.fence is None:
        return rec
    try:
        rec = plane.update(rec.app, without_fence(rec.epoch, by=run_id))
        log.warning("%s: fence lifted; %s stays active at epoch %s", rec.app, rec.active.value, rec.epoch)
    except HandoffError as exc:  # another handoff's fence (e.g. a failover's): not ours to lift
        log.info("%s: %s", rec.app, exc)
    return rec
