"""Baton on a Kafka that only speaks TLS with client certificates: the broker (the embedded Tansu)
sits behind a TLS terminator and advertises the terminator's port, so a client that leaves out the
security settings gets nowhere. With BATON_KAFKA_CLIENT_CONFIG naming a file of them, everything
Baton runs goes through TLS: topic creation (admin), the control log, a slot (its source, sink,
follower, lease and status), a deferrable trigger's check, the verifier's read. The client key's
password is a secret: it is in neither a process's command line nor the slot's log nor a trigger's
serialized arguments."""

import asyncio
import uuid

import psutil
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from baton.kafka.admin import delete_topics
from baton.kafka.client_config import CLIENT_CONFIG_ENV
from baton.kafka.control_log import close_writers, read_control, write_control
from baton.local.broker import Broker
from baton.local.procs import free_port
from baton.records import ControlRecord, Slot, SlotSpec, SlotState
from baton.tools.verify import read_output, verify
from tests.support.slots import make_app, produce_clicks, start_slot, stop_slot, wait_until_emitted
from tests.support.tls import TlsTerminator, make_pki

pytestmark = pytest.mark.integration


@pytest.fixture
def tls_cluster(tmp_path, monkeypatch):
    """(TLS bootstrap, the test PKI, the terminator); no security settings anywhere yet."""
    monkeypatch.delenv(CLIENT_CONFIG_ENV, raising=False)
    pki = make_pki(tmp_path / "pki", f"pw-{uuid.uuid4().hex}")
    tls_port, plain_port = free_port(), free_port()
    terminator = TlsTerminator(pki, tls_port, plain_port).start()
    broker = Broker(state_dir=tmp_path / "broker", port=plain_port, advertised_port=tls_port)
    broker.start()
    try:
        yield f"127.0.0.1:{tls_port}", pki, terminator
    finally:
        close_writers(f"127.0.0.1:{tls_port}")
        broker.stop()
        terminator.stop()


@pytest.fixture
def tls_broker(tls_cluster, tmp_path, monkeypatch):
    """(TLS bootstrap, the key's password, the terminator): BATON_KAFKA_CLIENT_CONFIG set for this
    process and the slots it starts."""
    bootstrap, pki, terminator = tls_cluster
    monkeypatch.setenv(CLIENT_CONFIG_ENV, str(pki.write_client_config(tmp_path / "kafka-client.json")))
    return bootstrap, pki.client_key_password, terminator


def test_a_client_without_the_security_settings_is_refused(tls_broker):
    bootstrap, _, _ = tls_broker
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=3)


def test_a_slot_runs_exactly_once_through_tls_and_no_secret_shows(tls_broker, tmp_path):
    from baton_airflow.triggers.status import SlotRunningTrigger

    bootstrap, password, terminator = tls_broker
    app, path = make_app(bootstrap, tmp_path)  # its topics made through TLS
    write_control(
        bootstrap,
        ControlRecord(
            app=app.name, revision=1, epoch=1, active=Slot.BLUE, slots={Slot.BLUE: SlotSpec(SlotState.RUNNING, "v1")}
        ),
    )
    assert read_control(bootstrap, app.name).epoch == 1
    truth, bad = produce_clicks(bootstrap, app.input.topic, 3_000, users=50, bad_every=50)
    proc = start_slot(bootstrap, path, tmp_path)
    try:
        wait_until_emitted(bootstrap, app, 3_000)
        verdict = verify(truth, read_output(bootstrap, app.output.topic, app.output.partitions))
        assert verdict.ok, verdict.summary()

        trigger = SlotRunningTrigger(app=app.name, slot="blue", bootstrap=bootstrap, timeout_s=60, poll_s=0.5)
        event = asyncio.run(anext(trigger.run()))
        assert event.payload["status"] == "met", event.payload
        assert password not in repr(trigger.serialize())

        command_lines = []
        for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]:
            try:
                command_lines.append(" ".join(p.cmdline()))
            except (psutil.ZombieProcess, psutil.NoSuchProcess):  # a Python worker that just ended
                continue
        assert any("java" in c for c in command_lines), command_lines  # the slot's JVM is among them
        assert not [c for c in command_lines if password in c]
    finally:
        assert stop_slot(proc) == 0
    assert password not in proc.log_path.read_text(errors="replace")
    assert terminator.accepted >= 5  # every client came through TLS: the app's, the control log's, the tests'
    delete_topics(bootstrap, [t.name for t in app.topics()])


def test_the_connections_form_is_enough_for_the_hooks_a_slot_they_start_and_a_trigger(
    tls_cluster, tmp_path, monkeypatch
):
    """No BATON_KAFKA_CLIENT_CONFIG: the Airflow connection's TLS fields alone. The hooks' clients use
    them, the slot the Spark hook starts gets their private file's path, and a trigger re-created in
    a process that never saw the connection (the triggerer) reads the same file."""
    import json

    from baton.apps import load_definition
    from baton.kafka import client_config
    from baton.kafka.admin import TopicSpec
    from baton.settings import CONTROL_TOPIC, STATUS_TOPIC
    from baton_airflow.hooks.kafka import BatonKafkaHook
    from baton_airflow.hooks.spark import BatonSparkHook
    from baton_airflow.triggers.status import SlotRunningTrigger

    bootstrap, pki, terminator = tls_cluster
    password = pki.client_key_password
    monkeypatch.setenv("BATON_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(client_config, "_registered", {})
    monkeypatch.setenv(
        "AIRFLOW_CONN_BATON_KAFKA",
        json.dumps(
            {
                "conn_type": "baton_kafka",
                "host": bootstrap,
                "extra": {
                    "security_protocol": "SSL",
                    "ssl_ca_location": str(pki.ca),
                    "ssl_certificate_location": str(pki.client_cert),
                    "ssl_key_location": str(pki.client_key),
                    "ssl_key_password": password,
                },
            }
        ),
    )
    kafka = BatonKafkaHook()
    assert kafka.bootstrap == bootstrap
    name = f"cc_{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nmodule: spark_apps.apps.click_counts\nversion: v1\n"
        f"input: {{topic: in-{name}, partitions: 2}}\noutput: {{topic: out-{name}, partitions: 2}}\n"
        "trigger_ms: 300\nmax_records_per_trigger: 2000\n"
    )
    app = load_definition(path)
    kafka.ensure_topics(
        [TopicSpec(CONTROL_TOPIC, 1, {"cleanup.policy": "compact"}), TopicSpec(STATUS_TOPIC, 1), *app.topics()]
    )  # through the hook's own admin client
    write_control(
        bootstrap,
        ControlRecord(
            app=app.name, revision=1, epoch=1, active=Slot.BLUE, slots={Slot.BLUE: SlotSpec(SlotState.RUNNING, "v1")}
        ),
    )
    truth, _ = produce_clicks(bootstrap, app.input.topic, 2_000, users=40, bad_every=0)
    spark = BatonSparkHook(master="local[2]", state_dir=tmp_path / "state")
    rec = spark.ensure_started(str(path), "blue", bootstrap)
    try:
        assert rec.client_config_file and password not in rec.client_config_file
        trigger = SlotRunningTrigger(app=app.name, slot="blue", bootstrap=bootstrap, timeout_s=120, poll_s=0.5)
        path_arg = trigger.serialize()[1]["client_config_file"]
        assert path_arg == rec.client_config_file and password not in json.dumps(trigger.serialize())
        monkeypatch.setattr(client_config, "_registered", {})  # the triggerer: no connection seen there
        again = SlotRunningTrigger(**trigger.serialize()[1])
        event = asyncio.run(anext(again.run()))
        assert event.payload["status"] == "met", event.payload
        wait_until_emitted(bootstrap, app, 2_000)
        verdict = verify(truth, read_output(bootstrap, app.output.topic, app.output.partitions))
        assert verdict.ok, verdict.summary()
        command_lines = []
        for p in [psutil.Process(rec.pid), *psutil.Process(rec.pid).children(recursive=True)]:
            try:
                command_lines.append(" ".join(p.cmdline()))
            except (psutil.ZombieProcess, psutil.NoSuchProcess):
                continue
        assert any("java" in c for c in command_lines) and not [c for c in command_lines if password in c]
    finally:
        spark.stop(app.name, "blue", grace_s=60)
    assert password not in open(rec.log_path, errors="replace").read()
    delete_topics(bootstrap, [t.name for t in app.topics()])
