"""The Kafka hook's client settings. The connection gives the bootstrap, client tuning and, from its
form, the cluster's security (TLS, SASL): registered for that bootstrap in the hook's process, and
carried to slots and triggers as the path of a private file, never as values. A connection without
security leaves the file BATON_KAFKA_CLIENT_CONFIG names in charge."""

import json
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from baton.kafka import client_config
from baton.kafka.client_config import CLIENT_CONFIG_ENV, kafka_config
from baton_airflow.hooks.kafka import BatonKafkaHook
from baton_airflow.hooks.spark import BatonSparkHook
from baton_airflow.triggers.status import SlotRunningTrigger

SECRET = "s3cret-sasl-pw"
KEY_SECRET = "s3cret-key-pw"


@pytest.fixture(autouse=True)
def clean(monkeypatch, tmp_path):
    monkeypatch.delenv(CLIENT_CONFIG_ENV, raising=False)
    monkeypatch.setenv("BATON_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(client_config, "_registered", {})


def hook_with(monkeypatch, extra: dict, **conn) -> BatonKafkaHook:
    connection = SimpleNamespace(
        extra_dejson=dict(extra), host=conn.get("host"), login=conn.get("login"), password=conn.get("password")
    )
    monkeypatch.setattr(BatonKafkaHook, "get_connection", classmethod(lambda cls, conn_id: connection))
    return BatonKafkaHook()


def test_without_security_in_the_connection_the_files_settings_apply(tmp_path, monkeypatch):
    path = tmp_path / "kafka-client.json"
    path.write_text(json.dumps({"security.protocol": "SSL", "ssl.ca.location": "/etc/ca.pem"}))
    monkeypatch.setenv(CLIENT_CONFIG_ENV, str(path))
    hook = hook_with(monkeypatch, {"bootstrap.servers": "k1:9093", "client.id": "airflow"})
    assert hook.client_config() == {
        "security.protocol": "SSL",
        "ssl.ca.location": "/etc/ca.pem",
        "client.id": "airflow",
        "bootstrap.servers": "k1:9093",
    }
    assert hook.bootstrap == "k1:9093"


def test_the_connections_host_is_the_bootstrap_before_its_extra(monkeypatch):
    hook_with(monkeypatch, {"bootstrap.servers": "old:9092", "client.id": "airflow"}, host="k1:9092,k2:9092")
    assert BatonKafkaHook().client_config() == {"client.id": "airflow", "bootstrap.servers": "k1:9092,k2:9092"}
    assert BatonKafkaHook(bootstrap_servers="arg:9092").bootstrap == "arg:9092"


def test_the_forms_security_reaches_every_client_of_that_cluster_here_and_no_other(monkeypatch):
    hook = hook_with(
        monkeypatch,
        {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "extra__baton_kafka__ssl_ca_location": "/etc/ca.pem",
            "client.id": "airflow",
        },
        host="k1:9093",
        login="baton",
        password=SECRET,
    )
    _, security, tuning = hook.connection_settings()
    assert SECRET not in repr(security) and tuning == {"client.id": "airflow"}
    assert hook.client_config()["sasl.password"] == SECRET
    # Any client made in this process for that cluster (control log, tail reads, admin) gets them ...
    assert kafka_config("k1:9093", {"group.id": "g"}) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "baton",
        "sasl.password": SECRET,
        "ssl.ca.location": "/etc/ca.pem",
        "group.id": "g",
        "bootstrap.servers": "k1:9093",
    }
    # ... and a client of another cluster does not.
    assert kafka_config("other:9092") == {"bootstrap.servers": "other:9092"}


def test_slots_and_triggers_get_the_path_of_a_private_file_never_the_secrets(monkeypatch):
    hook = hook_with(
        monkeypatch,
        {"security_protocol": "SSL", "ssl_key_location": "/etc/client.key", "ssl_key_password": KEY_SECRET},
        host="k1:9093",
    )
    bootstrap = hook.bootstrap
    spec = BatonSparkHook(master="local[2]").spec("click_counts", "blue", bootstrap)
    path = Path(spec.client_config_file)
    assert path.is_file() and stat.S_IMODE(path.stat().st_mode) == 0o600 and KEY_SECRET not in str(path)
    assert json.loads(path.read_text())["ssl.key.password"] == KEY_SECRET
    trigger = SlotRunningTrigger(app="click_counts", slot="blue", bootstrap=bootstrap)
    serialized = json.dumps(trigger.serialize())
    assert KEY_SECRET not in serialized and trigger.serialize()[1]["client_config_file"] == str(path)
    # In the triggerer (a process where nothing was registered) the path is what the clients read.
    monkeypatch.setattr(client_config, "_registered", {})
    client_config.use_file(bootstrap, trigger.client_config_file)
    assert kafka_config(bootstrap)["ssl.key.password"] == KEY_SECRET


def test_without_a_connections_security_slots_and_triggers_keep_the_environments_file(monkeypatch):
    hook = hook_with(monkeypatch, {}, host="k1:9092")
    spec = BatonSparkHook(master="local[2]").spec("click_counts", "blue", hook.bootstrap)
    assert spec.client_config_file == ""
    assert SlotRunningTrigger(app="a", slot="blue", bootstrap=hook.bootstrap).client_config_file == ""


@pytest.mark.parametrize(
    "extra, says",
    [
        ({"security_protocol": "TLS"}, "security protocol 'TLS' is not one of"),
        ({"isolation.level": "read_uncommitted", "sasl.password": SECRET}, None),  # tuning: librdkafka's to judge
    ],
)
def test_a_wrong_security_setting_names_the_connection_and_no_secret(monkeypatch, extra, says):
    hook = hook_with(monkeypatch, extra, host="k1:9093", password=SECRET)
    if says is None:
        assert hook.connection_settings()[2] == {"isolation.level": "read_uncommitted"}
        return
    with pytest.raises(ValueError, match=f"connection baton_kafka: {says}") as err:
        hook.client_config()
    assert SECRET not in str(err.value)


def test_the_connections_secrets_are_masked_in_task_logs(monkeypatch):
    from airflow.sdk._shared.secrets_masker import redact

    hook = hook_with(
        monkeypatch,
        {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "ssl.key.password": KEY_SECRET},
        host="k1:9093",
        login="baton",
        password=SECRET,
    )
    hook.connection_settings()
    line = f"connecting with {SECRET} and {KEY_SECRET} as baton"
    assert redact(line) == "connecting with *** and *** as baton"


def test_a_hook_reads_its_connection_once(monkeypatch):
    """Each read of a connection in a task is a round trip to the API server; a step reads the bootstrap
    for every client it makes, and the e2e resume test holds a task's supervisor after its first."""
    reads = []
    connection = SimpleNamespace(
        extra_dejson={"client.id": "baton-test"}, host="broker:9092", login=None, password=None
    )
    monkeypatch.setattr(
        BatonKafkaHook, "get_connection", classmethod(lambda cls, conn_id: reads.append(conn_id) or connection)
    )
    hook = BatonKafkaHook()
    assert [hook.bootstrap, hook.bootstrap] == ["broker:9092", "broker:9092"]
    hook.connection_settings()[2]["client.id"] = "changed by a caller"
    assert hook.client_config()["client.id"] == "baton-test"
    assert reads == ["baton_kafka"]
    assert BatonKafkaHook().bootstrap == "broker:9092" and reads == ["baton_kafka", "baton_kafka"]


def test_a_kafka_provider_connection_is_read_as_it_is_and_its_consumer_settings_left_out(monkeypatch):
    """The Kafka provider's connection type keeps the whole librdkafka configuration in its extra:
    the bootstrap and SASL come from there; its consumers' group and offset reset are not Baton's."""
    extra = {
        "bootstrap.servers": "k1:9093,k2:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "baton",
        "sasl.password": SECRET,
        "group.id": "analytics",
        "auto.offset.reset": "earliest",
        "client.id": "airflow",
    }
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": extra}))
    config = BatonKafkaHook("kafka_default").client_config()
    assert config == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "baton",
        "sasl.password": SECRET,
        "client.id": "airflow",
        "bootstrap.servers": "k1:9093,k2:9093",
    }


def test_baton_kafka_conn_id_names_the_connection_every_baton_task_uses():
    """Read when the provider is imported (an Airflow component's start): a fresh interpreter."""
    import os
    import subprocess
    import sys

    probe = "from baton_airflow.hooks.kafka import BatonKafkaHook as H; print(H.default_conn_name)"
    named = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "BATON_KAFKA_CONN_ID": "kafka_default"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert named.stdout.strip() == "kafka_default"
    unset = {k: v for k, v in os.environ.items() if k != "BATON_KAFKA_CONN_ID"}
    default = subprocess.run([sys.executable, "-c", probe], env=unset, capture_output=True, text=True, check=True)
    assert default.stdout.strip() == "baton_kafka"
