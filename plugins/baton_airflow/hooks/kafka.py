"""Kafka I/O for the control plane. Owns the connection; operators never build clients themselves.

Bootstrap precedence (one, stated): hook argument > Airflow Connection `baton_kafka` (its host,
"Bootstrap servers" in the form, else its extra's "bootstrap.servers") > BATON_KAFKA_BOOTSTRAP
environment > baton.settings default. The extra may carry client tuning (client.id, socket.*).

A deployment that already has a connection of the Kafka provider's type (`kafka`: its extra is the
librdkafka configuration, e.g. `kafka_default`) points Baton at it with BATON_KAFKA_CONN_ID instead of
defining `baton_kafka`: its bootstrap and security keys are read the same way, and its consumer
settings (group.id, auto.offset.reset, ...), which are the provider's consumers' and not Baton's, are
left out (logged).

Security (TLS, SASL): the connection's form (security protocol, SASL mechanism, login and password
as the SASL username and password, CA and client certificate, client key and its password; or the
same as librdkafka keys in the extra) gives one KafkaSecurity for the cluster. The hook registers it
for the cluster's bootstrap in its process, so every client made there (control log, status, admin,
tail reads) uses it, and writes it to a private file under the state directory whose path goes to
the slots the Spark hook starts (their environment) and to the triggers the sensors defer to. A
connection without security settings leaves the file BATON_KAFKA_CLIENT_CONFIG names in charge
(baton.kafka.client_config). Secrets never reach a command line, a trigger's arguments or a log.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook

from baton.kafka.admin import TopicSpec, ensure_topics
from baton.kafka.client_config import ALLOWED_PREFIXES, KafkaSecurity, is_secret, kafka_config, register
from baton.kafka.tail import end_offsets
from baton.settings import Settings
from baton_airflow.provider_info import KAFKA_CONN_TYPE, KAFKA_FORM_FIELDS, ui_field_behaviour


def mask_secrets(settings: dict[str, Any]) -> None:
    """Tell Airflow's log masker every secret value of these settings, whatever its key is called in
    the connection (Airflow masks the password field and extra keys named like a secret; a key
    password given as a librdkafka key in the extra would otherwise rely on its name)."""
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # Airflow 3.0's place for it
        from airflow.sdk.execution_time.secrets_masker import mask_secret  # type: ignore[no-redef]
    for key, value in settings.items():
        if value and is_secret(key):
            mask_secret(str(value), key)


def security_dir() -> Path:
    """Where the connections' security files go (readable by this user alone)."""
    return Settings.load().state_dir / "kafka-client"


# Which Airflow connection Baton's Kafka clients use (read when the provider is imported).
CONN_ID_ENV = "BATON_KAFKA_CONN_ID"
# A Kafka provider connection's consumer-group settings: its consumers', never Baton's (Baton's readers
# assign their partitions and keep their own positions).
CONSUMER_GROUP_KEYS = frozenset(
    {
        "group.id",
        "group.instance.id",
        "group.protocol",
        "auto.offset.reset",
        "enable.auto.commit",
        "auto.commit.interval.ms",
        "enable.auto.offset.store",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "partition.assignment.strategy",
    }
)


class BatonKafkaHook(BaseHook):
    conn_name_attr = "kafka_conn_id"
    default_conn_name = os.environ.get(CONN_ID_ENV, "").strip() or "baton_kafka"
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
        self._settings: tuple[str, KafkaSecurity, dict[str, Any]] | None = None

    def _connection(self):
        try:
            return self.get_connection(self.kafka_conn_id)
        except Exception as exc:  # a missing connection falls back to the environment default
            if "isn't defined" not in str(exc) and "not found" not in str(exc).lower():
                raise
            return None

    def connection_settings(self) -> tuple[str, KafkaSecurity, dict[str, Any]]:
        """(bootstrap, the cluster's security settings, client tuning) from the connection, checked.
        Read once per hook: in a task each read is a round trip through the task's supervisor to the
        API server, and a step reads the bootstrap for every client it makes (a hook lives one step)."""
        if self._settings is None:
            self._settings = self._read_connection_settings()
        bootstrap, security, tuning = self._settings
        return bootstrap, security, dict(tuning)

    def _read_connection_settings(self) -> tuple[str, KafkaSecurity, dict[str, Any]]:
        conn = self._connection()
        extra: dict[str, Any] = dict(conn.extra_dejson) if conn is not None else {}
        host = (getattr(conn, "host", None) or "").strip() or None
        from_extra = extra.pop("bootstrap.servers", None)
        bootstrap = self._bootstrap_arg or host or from_extra or Settings.load().kafka_bootstrap
        form = {}
        for name in KAFKA_FORM_FIELDS:  # the form's fields (older UIs prefix them)
            value = extra.pop(name, None) or extra.pop(f"extra__{KAFKA_CONN_TYPE}__{name}", None)
            if value not in (None, ""):
                form[name.replace("_", ".")] = value
        security: dict[str, Any] = {
            k: extra.pop(k)
            for k in list(extra)  # librdkafka's keys in the extra
            if k.startswith(ALLOWED_PREFIXES) and not k.startswith(("client.", "socket."))
        }
        security.update(form)
        if conn is not None and getattr(conn, "login", None):
            security["sasl.username"] = conn.login
        if conn is not None and getattr(conn, "password", None):
            security["sasl.password"] = conn.password
        mask_secrets(security)
        tuning = {k: v for k, v in extra.items() if k not in CONSUMER_GROUP_KEYS}
        if ignored := sorted(k for k in extra if k not in tuning):
            self.log.info("connection %s: not Baton's client settings, left out: %s", self.kafka_conn_id, ignored)
        try:
            return bootstrap, KafkaSecurity.from_settings(security), tuning
        except ValueError as exc:
            raise ValueError(f"connection {self.kafka_conn_id}: {exc}") from None

    def client_config(self) -> dict[str, Any]:
        """librdkafka settings: the cluster's security (the connection's, registered for its bootstrap in
        this process; else the environment's file), the connection's tuning, the bootstrap."""
        bootstrap, security, tuning = self.connection_settings()
        if security:
            register(bootstrap, security)
        return kafka_config(bootstrap, tuning)

    def test_connection(self) -> tuple[bool, str]:
        """Airflow's connection test: the cluster answers a metadata request with these settings."""
        from confluent_kafka.admin import AdminClient

        try:
            config = self.client_config()
            md = AdminClient(config).list_topics(timeout=10)
        except Exception as exc:  # the test's answer is the reason, not a traceback
            return False, f"{type(exc).__name__}: {exc}"
        return True, (
            f"{config['bootstrap.servers']}: {len(md.brokers)} broker(s), {len(md.topics)} topic(s), "
            f"the control topic {'present' if 'baton.control' in md.topics else 'missing (run baton_topics)'}"
        )

    @property
    def bootstrap(self) -> str:
        return self.client_config()["bootstrap.servers"]

    def ensure_topics(self, specs: Iterable[TopicSpec]) -> list[str]:
        return ensure_topics(self.bootstrap, specs)

    def positions(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        """The end of each partition now (read committed; see baton.kafka.tail.end_offsets)."""
        return end_offsets(self.bootstrap, topic, partitions)

    def bounds(self, topic: str, partitions: Iterable[int]) -> tuple[dict[int, int], dict[int, int]]:
        """(low, end) of each partition now (baton.kafka.positions.bounds)."""
        from baton.kafka.positions import bounds

        return bounds(self.bootstrap, topic, partitions)

    def offsets_for_timestamp(self, topic: str, partitions: Iterable[int], ts_ms: int) -> dict[int, int]:
        """Each partition's first offset at or after `ts_ms` (baton.kafka.positions.offsets_for_timestamp)."""
        from baton.kafka.positions import offsets_for_timestamp

        return offsets_for_timestamp(self.bootstrap, topic, partitions, ts_ms)

    def group_offsets(
        self, group: str, topic: str, partitions: Sequence[int], timeout_s: float = 15.0
    ) -> dict[int, int]:
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
