"""The click-count app in its harness, on the real broker and real Spark: exactly once through a
kill -9 of the driver, bad input to the dead-letter topic without a restart, graceful SIGTERM."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from baton.apps import load_definition
from baton.kafka.admin import TopicSpec, delete_topics, ensure_topics
from baton.kafka.control_log import write_control
from baton.records import ControlRecord, Slot, SlotSpec, SlotState, StatusRecord
from baton.settings import CONTROL_TOPIC, STATUS_TOPIC
from baton.tools.verify import read_output, verify
from spark_apps.runtime.kafka_sink import read_last_marker

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[4]


@pytest.fixture
def app(bootstrap, tmp_path):
    name = f"cc_{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nmodule: spark_apps.apps.click_counts\nversion: v1\n"
        f"input: {{topic: clicks-{name}, partitions: 2}}\noutput: {{topic: counts-{name}, partitions: 2}}\n"
        "trigger_ms: 300\nmax_records_per_trigger: 2000\n"
    )
    app = load_definition(path)
    ensure_topics(bootstrap, [TopicSpec(CONTROL_TOPIC, 1, {"cleanup.policy": "compact"}), TopicSpec(STATUS_TOPIC, 1),
                              *app.topics()])
    write_control(bootstrap, ControlRecord(app=name, revision=1, epoch=1, active=Slot.BLUE,
                                           slots={Slot.BLUE: SlotSpec(SlotState.RUNNING, "v1")}))
    yield app, path
    delete_topics(bootstrap, [t.name for t in app.topics()])


def start_slot(bootstrap, path, state_dir):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "spark_apps.runtime.run", "--app", str(path), "--slot", "blue",
                             "--bootstrap", bootstrap, "--state-dir", str(state_dir)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def produce(bootstrap, topic, n, users, bad_every=0):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    truth, bad = Counter(), 0
    for i in range(n):
        if bad_every and i % bad_every == 0:
            p.produce(topic, b"{broken" if i % 2 else b'{"timestamp": 1}', b"bad")
            bad += 1
            continue
        u = f"user{i % users}"
        truth[u] += 1
        p.produce(topic, json.dumps({"user_id": u, "timestamp": 1678886400 + i}).encode(), u.encode())
    p.flush()
    return truth, bad


def wait_until_emitted(bootstrap, app, total, timeout_s=180):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = read_last_marker(bootstrap, app.commits_topic, app.name)
        if m is not None and sum(m.emitted.values()) >= total:
            return m
        time.sleep(1)
    raise AssertionError(f"output did not reach {total} input records in {timeout_s}s")


def kill_group(proc):
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def test_kill_9_mid_stream_then_restart_is_exactly_once(bootstrap, app, tmp_path):
    app, path = app
    truth, bad = produce(bootstrap, app.input.topic, 30_000, users=500, bad_every=100)
    proc = start_slot(bootstrap, path, tmp_path)
    try:
        # Let a few batches commit, then kill -9 the driver (and its JVM) in the middle of the stream.
        deadline = time.monotonic() + 120
        while (m := read_last_marker(bootstrap, app.commits_topic, app.name)) is None or sum(m.emitted.values()) < 6000:
            assert time.monotonic() < deadline and proc.poll() is None, "app made no progress"
            time.sleep(0.3)
        kill_group(proc)
        killed_at = sum(read_last_marker(bootstrap, app.commits_topic, app.name).emitted.values())
        assert killed_at < 30_000, "the app finished before it was killed: the test proves nothing"
        proc = start_slot(bootstrap, path, tmp_path)
        wait_until_emitted(bootstrap, app, 30_000)
        verdict = verify(truth, read_output(bootstrap, app.output.topic, app.output.partitions))
        assert verdict.ok, verdict.summary()
        assert verdict.keys == len(truth) == 495  # users 0, 100, ... only ever get bad events
        # Every bad event is in the dead-letter topic once, with its reason, and the app kept running.
        dead = read_dead(bootstrap, app.dead_letter_topic)
        assert len(dead) == bad
        assert all(h["baton.reason"] for h in dead)
        assert len({h["baton.source"] for h in dead}) == bad
        assert proc.poll() is None
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(90) == 0  # graceful stop at a batch boundary
    statuses = read_status(bootstrap, app.name)
    assert statuses[-1].state is SlotState.STOPPED
    running = [s for s in statuses if s.batch_id >= 0]
    assert running and running[-1].dead_letters > 0 and running[-1].state_rows == len(truth)
    assert any(s.restore_ms is not None for s in running)


def read_topic(bootstrap, topic, keep):
    """keep(message) -> item or None for every record of a one-partition topic, read to its end."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    while True:
        m = c.poll(5)
        if m is None or (m.error() and m.error().code() == KafkaError._PARTITION_EOF):
            break
        if not m.error() and (item := keep(m)) is not None:
            out.append(item)
    c.close()
    return out


def read_dead(bootstrap, topic):
    return read_topic(bootstrap, topic, lambda m: {k: v.decode() for k, v in m.headers()})


def read_status(bootstrap, app_name):
    key = f"{app_name}/blue".encode()
    return read_topic(bootstrap, STATUS_TOPIC, lambda m: StatusRecord.from_bytes(m.value()) if m.key() == key else None)
