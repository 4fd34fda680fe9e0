"""The output tailer against the real broker: stamps readable times, drains to the end after a stop."""

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from baton.records import CORRECTION_HEADER
from baton.tools.verify import Observations, OutputTailer, verify

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[4]


def commit(producer, topic, rows, headers=None):
    """One transaction of (user, count) rows; returns the wall time the commit returned."""
    producer.begin_transaction()
    for user, count in rows:
        producer.produce(topic, json.dumps({"user_id": user, "count": count}).encode(), user.encode(), headers=headers)
    producer.commit_transaction(30)
    return time.time()


def test_tailer_stamps_each_transaction_and_drains_after_stop(bootstrap, topics):
    topic = topics(out=2)["out"]
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{uuid.uuid4().hex}"})
    p.init_transactions(30)
    before = commit(p, topic, [("a", 1), ("b", 1)])  # committed before the tailer starts
    stop = threading.Event()
    result = {}
    tailer = threading.Thread(target=lambda: result.update(obs=OutputTailer(bootstrap, topic, 2).run(stop)))
    tailer.start()
    time.sleep(3.0)
    t2 = commit(p, topic, [("a", 2), ("c", 1)])
    time.sleep(1.0)
    t3 = commit(p, topic, [("b", 2)])
    commit(p, topic, [("c", 1)], headers=[(CORRECTION_HEADER, b"2")])  # a corrected-output publish
    stop.set()  # at once: the last transactions are only caught by the drain
    tailer.join(60)
    obs = result["obs"]
    assert obs.corrected.tolist() == [False] * 5 + [True]
    verdict = verify(Counter(a=2, b=2, c=1), obs.pairs(), obs.corrected)
    assert verdict.ok and verdict.corrections == 1
    assert verify(Counter(a=2, b=2, c=1), obs.pairs()).duplicated == ["c"]
    stamp = {}  # the first time each (user, count) was readable
    for u, c, t in zip(obs.users, obs.counts, obs.times):
        stamp.setdefault((obs.user_ids[u], int(c)), t)
    assert len(stamp) == 5 and obs.unreadable == 0
    assert before < stamp[("a", 1)] < t2 - 1.0  # read at the tailer's start
    assert t2 - 0.05 <= stamp[("a", 2)] < t2 + 0.5  # readable about when committed
    assert stamp[("a", 2)] == stamp[("c", 1)]
    assert t3 - 0.05 <= stamp[("b", 2)] < t3 + 1.0


def test_cli_tails_until_sigterm(bootstrap, topics, tmp_path):
    topic = topics(out=1)["out"]
    out = tmp_path / "seen.npz"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "baton.tools.verify",
            "tail",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--partitions",
            "1",
            "--out",
            str(out),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        p = Producer({"bootstrap.servers": bootstrap})
        p.produce(topic, b'{"user_id": "a", "count": 1}', b"a")
        p.produce(topic, b"not json", b"a")
        assert p.flush(10) == 0
        time.sleep(2.0)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert json.loads(stdout) == {"records": 1, "users": 1, "unreadable": 1}
    obs = Observations.load(out)
    assert obs.pairs() == [("a", 1)] and obs.unreadable == 1
