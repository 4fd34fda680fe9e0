"""Kafka I/O for the control plane. Owns the connection; operators never build clients themselves.

Settings precedence (one, stated): hook argument > Airflow Connection `baton_kafka` extra >
BATON_KAFKA_BOOTSTRAP environment > baton.settings default.
"""

from __future__ import annotations

from typing import Any, Iterable

from airflow.sdk import BaseHook

from baton.kafka.admin import TopicSpec, ensure_topics
from baton.settings import Settings


class BatonKafkaHook(BaseHook):
    conn_name_attr = "kafka_conn_id"
    default_conn_name = "baton_kafka"
    conn_type = "generic"
    hook_name = "Baton Kafka"

    def __init__(self, kafka_conn_id: str = default_conn_name, bootstrap_servers: str | None = None):
        super().__init__()
        self.kafka_conn_id = kafka_conn_id
        self._bootstrap_arg = bootstrap_servers

    def client_config(self) -> dict[str, Any]:
        """librdkafka settings: the connection's extra, with the bootstrap resolved by precedence."""
        extra: dict[str, Any] = {}
        try:
            extra = dict(self.get_connection(self.kafka_conn_id).extra_dejson)
        except Exception as exc:  # a missing connection falls back to the environment default
            if "isn't defined" not in str(exc) and "not found" not in str(exc).lower():
                raise
        bootstrap = self._bootstrap_arg or extra.pop("bootstrap.servers", None) or Settings.load().kafka_bootstrap
        return {**extra, "bootstrap.servers": bootstrap}

    @property
    def bootstrap(self) -> str:
        return self.client_config()["bootstrap.servers"]

    def ensure_topics(self, specs: Iterable[TopicSpec]) -> list[str]:
        return ensure_topics(self.bootstrap, specs)
