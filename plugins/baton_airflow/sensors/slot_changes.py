"""The baton_watch DAG's first task: wait, deferred, until a slot dies or a restarted one comes up
(baton_airflow.triggers.slot_changes); then the DAG runs baton_health at once. A wait that saw nothing
skips the rest of its run, and the next run watches on."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator

from baton_airflow.hooks.kafka import BatonKafkaHook
from baton_airflow.triggers.slot_changes import SlotChangeTrigger


class SlotChangeSensor(BaseOperator):
    """Returns the changes found (XCom: app, slot, kind, launch, why); skipped when none came in
    `wait_s`."""

    def __init__(
        self,
        *,
        wait_s: float = 3600.0,
        kafka_conn_id: str = BatonKafkaHook.default_conn_name,
        retry_delay: timedelta = timedelta(seconds=5),
        retries: int = 2,
        **kwargs: Any,
    ):
        # retries: apache/airflow#71580, a deferred task can end "success but queued"
        super().__init__(retry_delay=retry_delay, retries=retries, **kwargs)
        self.wait_s, self.kafka_conn_id = float(wait_s), kafka_conn_id

    def execute(self, context: Any) -> Any:
        self.defer(
            trigger=SlotChangeTrigger(bootstrap=BatonKafkaHook(self.kafka_conn_id).bootstrap, timeout_s=self.wait_s),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> list[dict[str, str]]:
        from airflow.sdk.exceptions import AirflowSkipException

        changes = list(event.get("changes") or [])
        if not changes:
            raise AirflowSkipException(str(event.get("message", "nothing changed")))
        for change in changes:
            self.log.info("%s/%s %s: %s", change.get("app"), change.get("slot"), change.get("kind"), change.get("why"))
        return changes
