"""The load generator against the real broker: what it says it sent is what the topic holds."""

import json
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from baton.tools.loadgen import LoadSpec, SendLog, run

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[4]


def read_topic(bootstrap, topic, partitions):
    """{partition: [(key, value), ...]} of every record, read to the end of every partition."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, done = {p: [] for p in range(partitions)}, set()
    try:
        while len(done) < partitions:
            msgs = c.consume(10_000, 5.0)
            assert msgs, "topic not read to its end"
            for m in msgs:
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    done.add(m.partition())
                else:
                    out[m.partition()].append((m.key().decode(), m.value()))
    finally:
        c.close()
    return out


def counted(records):
    """What the click-count app must count: {user: n} of the well-formed events, and the others."""
    good, bad = Counter(), 0
    for key, value in records:
        try:
            e = json.loads(value)
        except ValueError:
            bad += 1
            continue
        if isinstance(e.get("user_id"), str) and isinstance(e.get("timestamp"), int):
            assert e["user_id"] == key
            good[key] += 1
        else:
            bad += 1
    return good, bad


def test_paced_run_produces_exactly_its_send_log(bootstrap, topics):
    topic = topics(clicks=4)["clicks"]
    spec = LoadSpec.for_duration(2000, 2.0, keys=300, malformed=0.05, seed=11)
    log = run(spec, bootstrap, topic)
    assert log.users.size == 4000
    assert 1.9 < log.meta["elapsed_s"] < 2.5 and not log.meta["fell_behind"]
    by_partition = read_topic(bootstrap, topic, 4)
    records = [r for rs in by_partition.values() for r in rs]
    assert len(records) == 4000
    good, bad = counted(records)
    assert good == log.truth()
    assert bad == log.malformed()
    assert 100 < bad < 310  # 5% of 4000 = 200, sd ~14
    # A user's events sit in one partition, in send order: the n-th of them makes its count n.
    homes = {}
    for p, rs in by_partition.items():
        for key, _ in rs:
            assert homes.setdefault(key, p) == p
    ticks = log.send_times()
    assert ticks.min() >= log.meta["started"] and ticks.max() - ticks.min() < 2.1


def test_cli_writes_the_send_log(bootstrap, topics, tmp_path):
    topic = topics(clicks=2)["clicks"]
    out = tmp_path / "sends.npz"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "baton.tools.loadgen",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--rate",
            "inf",
            "--events",
            "1000",
            "--keys",
            "1000",
            "--sequential",
            "--malformed",
            "0",
            "--out",
            str(out),
            "--quiet",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["events"] == 1000 and summary["users"] == 1000 and summary["malformed"] == 0
    log = SendLog.load(out)
    assert log.truth() == Counter({f"user{i}": 1 for i in range(1000)})
    good, bad = counted([r for rs in read_topic(bootstrap, topic, 2).values() for r in rs])
    assert good == log.truth() and bad == 0


def test_cli_rejects_a_bad_share(bootstrap):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "baton.tools.loadgen",
            "--bootstrap",
            bootstrap,
            "--topic",
            "t",
            "--seconds",
            "1",
            "--malformed",
            "2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "malformed" in proc.stderr
