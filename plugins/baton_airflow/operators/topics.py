from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator

from baton_airflow.hooks.kafka import BatonKafkaHook


class EnsureTopicsOperator(BaseOperator):
    """Validate every app definition in include/apps, then create any missing topic (idempotent)."""

    def __init__(self, kafka_conn_id: str = BatonKafkaHook.default_conn_name, **kwargs: Any):
        super().__init__(**kwargs)
        self.kafka_conn_id = kafka_conn_id

    def execute(self, context: Any) -> dict[str, Any]:
        from baton.topics import platform_topics

        specs = platform_topics()  # raises AppDefinitionError naming file and field
        created = BatonKafkaHook(self.kafka_conn_id).ensure_topics(specs)
        self.log.info("topics ready: %d (created: %s)", len(specs), ", ".join(created) or "none")
        return {"topics": [s.name for s in specs], "created": created}
