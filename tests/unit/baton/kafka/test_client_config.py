"""The security settings every Kafka client Baton creates gets, from the file BATON_KAFKA_CLIENT_CONFIG
names: added under the client's own settings, checked, and masked wherever they are shown."""

import json
import os

import pytest

from baton.kafka.client_config import (CLIENT_CONFIG_ENV, ClientConfigError, client_settings, kafka_config,
                                       load_client_settings, redacted)


def write(tmp_path, settings) -> str:
    path = tmp_path / "kafka-client.json"
    path.write_text(json.dumps(settings))
    return str(path)


def test_without_the_variable_a_client_gets_its_own_settings_and_the_bootstrap(monkeypatch):
    monkeypatch.delenv(CLIENT_CONFIG_ENV, raising=False)
    assert kafka_config("b:9092", {"group.id": "g"}) == {"group.id": "g", "bootstrap.servers": "b:9092"}


def test_the_files_settings_come_first_and_the_bootstrap_last(tmp_path, monkeypatch):
    monkeypatch.setenv(CLIENT_CONFIG_ENV, write(tmp_path, {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "s3cret",
        "enable.ssl.certificate.verification": True}))
    conf = kafka_config("b:9093", {"group.id": "g", "client.id": "mine"})
    assert conf == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u",
                    "sasl.password": "s3cret", "enable.ssl.certificate.verification": "true",
                    "group.id": "g", "client.id": "mine", "bootstrap.servers": "b:9093"}


def test_a_changed_file_is_read_again(tmp_path, monkeypatch):
    path = write(tmp_path, {"security.protocol": "SSL"})
    monkeypatch.setenv(CLIENT_CONFIG_ENV, path)
    assert client_settings() == {"security.protocol": "SSL"}
    write(tmp_path, {"security.protocol": "SASL_SSL"})
    os.utime(path, (1, 1))  # a new mtime, whatever the clock's resolution
    assert client_settings() == {"security.protocol": "SASL_SSL"}


@pytest.mark.parametrize("settings, says", [
    ({"isolation.level": "read_uncommitted"}, "'isolation.level' is not a connection setting"),
    ({"transactional.id": "x"}, "'transactional.id' is not a connection setting"),
    ({"sasl.password": ["a"]}, "sasl.password must be a string"),
    (["security.protocol"], "must be a JSON object"),
])
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
    shown = redacted({"sasl.password": "s3cret", "ssl.key.password": "k", "sasl.oauthbearer.client.secret": "c",
                      "sasl.username": "u", "bootstrap.servers": "b:9093"})
    assert shown == {"sasl.password": "***", "ssl.key.password": "***", "sasl.oauthbearer.client.secret": "***",
                     "sasl.username": "u", "bootstrap.servers": "b:9093"}
