"""Bring your own Kafka: with BATON_KAFKA_BOOTSTRAP naming another cluster, `make up` (Platform.up)
starts no embedded broker and makes Baton's topics on that cluster; a cluster that does not answer
is a clear error naming it, not a hang."""

import time

import pytest
from confluent_kafka.admin import AdminClient

from baton.kafka.admin import delete_topics
from baton.kafka.client_config import kafka_config
from baton.local.platform import Platform
from baton.local.procs import free_port
from baton.settings import Settings
from baton.topics import platform_topics

pytestmark = pytest.mark.integration


def platform_on(bootstrap: str, state_dir) -> Platform:
    return Platform(
        Settings(
            state_dir=state_dir,
            kafka_port=free_port(),
            airflow_port=free_port(),
            kafka_bootstrap=bootstrap,
            spark_master="local[2]",
            external_kafka=True,
        )
    )


def test_settings_tell_another_cluster_from_the_embedded_broker(monkeypatch):
    monkeypatch.setenv("BATON_KAFKA_PORT", "29092")
    monkeypatch.delenv("BATON_KAFKA_BOOTSTRAP", raising=False)
    assert not Settings.load().external_kafka
    monkeypatch.setenv("BATON_KAFKA_BOOTSTRAP", "127.0.0.1:29092")
    assert not Settings.load().external_kafka
    monkeypatch.setenv("BATON_KAFKA_BOOTSTRAP", "kafka-1.example:9093,kafka-2.example:9093")
    assert Settings.load().external_kafka


def test_up_on_another_cluster_starts_no_broker_and_makes_the_topics_there(bootstrap, tmp_path):
    names = [t.name for t in platform_topics()]
    existing = set(AdminClient(kafka_config(bootstrap)).list_topics(timeout=10).topics)
    platform = platform_on(bootstrap, tmp_path / "state")
    said: list[str] = []
    try:
        platform.up(with_airflow=False, say=said.append)
        assert not platform.broker.running()  # nothing of ours: no Tansu under the state dir
        assert said[0] == f"broker: the Kafka cluster at {bootstrap} (BATON_KAFKA_BOOTSTRAP); no embedded broker"
        listed = AdminClient(kafka_config(bootstrap)).list_topics(timeout=10).topics
        assert set(names) <= set(listed)
        assert f"the Kafka cluster at {bootstrap} (BATON_KAFKA_BOOTSTRAP), not started here" in platform.status()
    finally:
        platform.down(say=lambda *_: None)
        delete_topics(bootstrap, [n for n in names if n not in existing and not n.startswith("baton.")])


def test_up_on_a_cluster_that_does_not_answer_says_so_within_its_timeout(tmp_path):
    dead = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=f"the Kafka cluster at {dead} .* did not answer"):
        platform_on(dead, tmp_path / "state").up(with_airflow=False, say=lambda *_: None)
    assert time.monotonic() - started < 30
