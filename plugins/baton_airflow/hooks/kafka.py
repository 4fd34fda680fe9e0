"""Kafka I/O for the control plane. Owns the connection; operators never build clients themselves.

Bootstrap precedence (one, stated): hook argument > Airflow Connection `baton_kafka` (its host,
"Bootstrap servers" in the form, else its extra's "bootstrap.servers") > BATON_KAFKA_BOOTSTRAP
environment > baton.settings default. The extra may carry client tuning (client.id, socket.*).

Security settings (TLS, SASL) are not the connection's: every Kafka client Baton creates, the slots'
and the triggers' included, reads them from the file BATON_KAFKA_CLIENT_CONFIG names
(baton.kafka.client_config), so that they reach processes that never see a connection and never
pass through a command line or a trigger's serialized arguments. A connection that carries them
is refused with that said, rather than half used.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from airflow.sdk import BaseHook

from baton.kafka.admin import TopicSpec, ensure_topics
from baton.kafka.client_config import ALLOWED_PREFIXES, CLIENT_CONFIG_ENV, kafka_config
from baton.kafka.tail import end_offsets
from baton.settings import Settings
from baton_airflow.provider_info import KAFKA_CONN_TYPE, ui_field_behaviour


class BatonKafkaHook(BaseHook):
    conn_name_attr = "kafka_conn_id"
    default_conn_name = "baton_kafka"
    conn_type = KAFKA_CONN_TYPE
    hook_name = "Baton Kafka"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """The connection form (Airflow < 3.2; later ones read provider_info's declaration)."""
        return ui_field_behaviour(KAFKA_CONN_TYPE)

    def __init__(self, kafka_conn_id: str = default_conn_name, bootstrap_servers: str | None = None):
        super().__init__()
        self.kafka_conn_id = kafka_conn_id
        self._bootstrap_arg = bootstrap_servers

    def client_config(self) -> dict[str, Any]:
        """librdkafka settings: the security file's, the connection's extra, the bootstrap resolved by
        precedence."""
        extra: dict[str, Any] = {}
        host = None
        try:
            conn = self.get_connection(self.kafka_conn_id)
            extra, host = dict(conn.extra_dejson), (getattr(conn, "host", None) or "").strip() or None
        except Exception as exc:  # a missing connection falls back to the environment default
            if "isn't defined" not in str(exc) and "not found" not in str(exc).lower():
                raise
        from_extra = extra.pop("bootstrap.servers", None)
        bootstrap = self._bootstrap_arg or host or from_extra or Settings.load().kafka_bootstrap
        security = sorted(k for k in extra if k.startswith(ALLOWED_PREFIXES) and not k.startswith(("client.", "socket.")))
        if security:
            raise ValueError(
                f"connection {self.kafka_conn_id}: {', '.join(security)} belong in the file {CLIENT_CONFIG_ENV} names "
                f"(a JSON object of librdkafka settings, readable by Airflow's processes and the slots they start), "
                f"not in the connection: the slots and triggers never see a connection")
        return kafka_config(bootstrap, extra)

    def test_connection(self) -> tuple[bool, str]:
        """Airflow's connection test: the cluster answers a metadata request with these settings."""
        from confluent_kafka.admin import AdminClient

        try:
            config = self.client_config()
            md = AdminClient(config).list_topics(timeout=10)
        except Exception as exc:  # the test's answer is the reason, not a traceback
            return False, f"{type(exc).__name__}: {exc}"
        return True, (f"{config['bootstrap.servers']}: {len(md.brokers)} broker(s), {len(md.topics)} topic(s), "
                      f"the control topic {'present' if 'baton.control' in md.topics else 'missing (run baton_topics)'}")

    @property
    def bootstrap(self) -> str:
        return self.client_config()["bootstrap.servers"]

    def ensure_topics(self, specs: Iterable[TopicSpec]) -> list[str]:
        return ensure_topics(self.bootstrap, specs)

    def positions(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        """The end of each partition now (read committed; see baton.kafka.tail.end_offsets)."""
        return end_offsets(self.bootstrap, topic, partitions)

    def group_offsets(self, group: str, topic: str, partitions: Sequence[int], timeout_s: float = 15.0) -> dict[int, int]:
        """The consumer group's committed offset per partition (absent: nothing committed there)."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({**self.client_config(), "group.id": group, "enable.auto.commit": False})
        try:
            committed = c.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout_s)
        finally:
            c.close()
        return {tp.partition: tp.offset for tp in committed if tp.offset >= 0}

    def group_lag(self, group: str, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        """Records between the group's committed offset (0 if none) and the partition's end."""
        ends, done = self.positions(topic, partitions), self.group_offsets(group, topic, partitions)
        return {p: max(0, ends[p] - done.get(p, 0)) for p in partitions}
