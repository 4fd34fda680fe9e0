"""The security settings every Kafka client Baton creates gets, from the file BATON_KAFKA_CLIENT_CONFIG
names: added under the client's own settings, checked, and masked wherever they are shown."""

import json
import os

import pytest

from baton.kafka.client_config import (
    CLIENT_CONFIG_ENV,
    ClientConfigError,
    client_settings,
    kafka_config,
    load_client_settings,
    redacted,
)


def write(tmp_path, settings) -> str:
    path = tmp_path / "kafka-client.json"
    path.write_text(json.dumps(settings))
    return str(path)


def test_without_the_variable_a_client_gets_its_own_settings_and_the_bootstrap(monkeypatch):
    monkeypatch.delenv(CLIENT_CONFIG_ENV, raising=False)
    assert kafka_config("b:9092", {"group.id": "g"}) == {"group.id": "g", "bootstrap.servers": "b:9092"}


def test_the_files_settings_come_first_and_the_bootstrap_last(tmp_path, monkeypatch):
    monkeypatch.setenv(
        CLIENT_CONFIG_ENV,
        write(
            tmp_path,
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "u",
                "sasl.password": "s3cret",
                "enable.ssl.certificate.verification": True,
            },
        ),
    )
    conf = kafka_config("b:9093", {"group.id": "g", "client.id": "mine"})
    assert conf == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "s3cret",
        "enable.ssl.certificate.verification": "true",
        "group.id": "g",
        "client.id": "mine",
        "bootstrap.servers": "b:9093",
    }


def test_a_changed_file_is_read_again(tmp_path, monkeypatch):
    path = write(tmp_path, {"security.protocol": "SSL"})
    monkeypatch.setenv(CLIENT_CONFIG_ENV, path)
    assert client_settings() == {"security.protocol": "SSL"}
    write(tmp_path, {"security.protocol": "SASL_SSL"})
    os.utime(path, (1, 1))  # a new mtime, whatever the clock's resolution
    assert client_settings() == {"security.protocol": "SASL_SSL"}


@pytest.mark.parametrize(
    "settings, says",
    [
        ({"isolation.level": "read_uncommitted"}, "'isolation.level' is not a connection setting"),
        ({"transactional.id": "x"}, "'transactional.id' is not a connection setting"),
        ({"sasl.password": ["a"]}, "sasl.password must be a string"),
        (["security.protocol"], "must be a JSON object"),
    ],
)
def test_a_file_that_sets_what_it_may_not_is_refused_with_the_reason(tmp_path, settings, says):
    with pytest.raises(ClientConfigError, match=says.replace("(", r"\(")):
        load_client_settings(write(tmp_path, settings))


def test_a_missing_or_broken_file_names_the_variable(tmp_path):
    with pytest.raises(ClientConfigError, match=f"{CLIENT_CONFIG_ENV}=.*cannot read"):
        load_client_settings(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ClientConfigError, match="not a JSON object"):
        load_client_settings(tmp_path / "bad.json")


def test_secrets_are_masked_for_a_log():
    shown = redacted(
        {
            "sasl.password": "s3cret",
            "ssl.key.password": "k",
            "sasl.oauthbearer.client.secret": "c",
            "sasl.username": "u",
            "bootstrap.servers": "b:9093",
        }
    )
    assert shown == {
        "sasl.password": "***",
        "ssl.key.password": "***",
        "sasl.oauthbearer.client.secret": "***",
        "sasl.username": "u",
        "bootstrap.servers": "b:9093",
    }


# -- a cluster's settings from a connection (KafkaSecurity), registered for its bootstrap


@pytest.fixture
def registry(monkeypatch):
    from baton.kafka import client_config

    monkeypatch.delenv(CLIENT_CONFIG_ENV, raising=False)
    monkeypatch.setattr(client_config, "_registered", {})
    return client_config


def test_a_clusters_security_is_typed_round_trips_and_hides_its_secrets():
    from baton.kafka.client_config import KafkaSecurity

    raw = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "u",
        "sasl.password": "pw1",
        "ssl.key.password": "pw2",
        "ssl.endpoint.identification.algorithm": "none",
    }
    security = KafkaSecurity.from_settings(raw)
    assert security.settings() == raw and security.sasl_username == "u"
    assert "pw1" not in repr(security) and "pw2" not in repr(security)
    assert not KafkaSecurity() and KafkaSecurity(security_protocol="SSL")
    with pytest.raises(ClientConfigError, match="'isolation.level' is not a connection setting"):
        KafkaSecurity.from_settings({"isolation.level": "read_uncommitted"})
    with pytest.raises(ClientConfigError, match="security protocol 'TLS' is not one of"):
        KafkaSecurity(security_protocol="TLS")


def test_registered_settings_apply_to_their_bootstrap_before_the_environments_file(tmp_path, monkeypatch, registry):
    from baton.kafka.client_config import KafkaSecurity

    monkeypatch.setenv(CLIENT_CONFIG_ENV, write(tmp_path, {"security.protocol": "SSL"}))
    registry.register("k1:9093", KafkaSecurity(security_protocol="SASL_SSL", sasl_mechanism="PLAIN"))
    assert kafka_config("k1:9093")["security.protocol"] == "SASL_SSL"
    assert kafka_config("k2:9093")["security.protocol"] == "SSL"  # another cluster: the file's
    registry.forget("k1:9093")
    assert kafka_config("k1:9093")["security.protocol"] == "SSL"


def test_the_private_file_is_the_owners_alone_and_named_by_what_it_holds(tmp_path, registry):
    from baton.kafka.client_config import KafkaSecurity, write_security_file

    security = KafkaSecurity(security_protocol="SASL_SSL", sasl_password="pw1")
    path = write_security_file(security, tmp_path / "kafka-client")
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert "pw1" not in path.name and write_security_file(security, tmp_path / "kafka-client") == path
    assert write_security_file(KafkaSecurity(security_protocol="SSL"), tmp_path / "kafka-client") != path
    assert registry.registered_file("k1:9093", tmp_path) is None
    registry.register("k1:9093", security)
    assert registry.registered_file("k1:9093", tmp_path / "kafka-client") == path
    registry.use_file("k2:9093", path)  # a triggerer's: the path it was given
    assert kafka_config("k2:9093")["sasl.password"] == "pw1"
