"""The Kafka hook's client settings: the connection gives the bootstrap and client tuning; security
settings come from BATON_KAFKA_CLIENT_CONFIG's file, the one place every Baton process reads them. A
connection that carries them is refused with where they belong, instead of being half used (the
hook's own clients with them, the slots and triggers without)."""

import json
from types import SimpleNamespace

import pytest

from baton.kafka.client_config import CLIENT_CONFIG_ENV
from baton_airflow.hooks.kafka import BatonKafkaHook


def hook_with_extra(monkeypatch, extra: dict) -> BatonKafkaHook:
    monkeypatch.setattr(BatonKafkaHook, "get_connection",
                        classmethod(lambda cls, conn_id: SimpleNamespace(extra_dejson=dict(extra))))
    return BatonKafkaHook()


def test_the_connections_bootstrap_with_the_files_security_settings(tmp_path, monkeypatch):
    path = tmp_path / "kafka-client.json"
    path.write_text(json.dumps({"security.protocol": "SSL", "ssl.ca.location": "/etc/ca.pem"}))
    monkeypatch.setenv(CLIENT_CONFIG_ENV, str(path))
    hook = hook_with_extra(monkeypatch, {"bootstrap.servers": "k1:9093", "client.id": "airflow"})
    assert hook.client_config() == {"security.protocol": "SSL", "ssl.ca.location": "/etc/ca.pem",
                                    "client.id": "airflow", "bootstrap.servers": "k1:9093"}
    assert hook.bootstrap == "k1:9093"


def test_a_connection_carrying_security_settings_is_refused_with_where_they_belong(monkeypatch):
    monkeypatch.delenv(CLIENT_CONFIG_ENV, raising=False)
    hook = hook_with_extra(monkeypatch, {"bootstrap.servers": "k1:9093", "security.protocol": "SASL_SSL",
                                         "sasl.password": "s3cret"})
    with pytest.raises(ValueError, match=f"sasl.password, security.protocol belong in the file {CLIENT_CONFIG_ENV}") as err:
        hook.client_config()
    assert "s3cret" not in str(err.value)


def test_the_connections_host_is_the_bootstrap_before_its_extra(monkeypatch):
    monkeypatch.delenv(CLIENT_CONFIG_ENV, raising=False)
    monkeypatch.setattr(BatonKafkaHook, "get_connection", classmethod(lambda cls, conn_id: SimpleNamespace(
        host="k1:9092,k2:9092", extra_dejson={"bootstrap.servers": "old:9092", "client.id": "airflow"})))
    assert BatonKafkaHook().client_config() == {"client.id": "airflow", "bootstrap.servers": "k1:9092,k2:9092"}
    assert BatonKafkaHook(bootstrap_servers="arg:9092").bootstrap == "arg:9092"
