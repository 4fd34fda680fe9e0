"""The windowed click app in its harness, on the real broker and real Spark: exact final counts per
(user, window) through a kill -9, late events not counted, and state that stays bounded while the
keys ever seen grow (steady churn of users, event time advancing)."""

import json
from collections import Counter

import pytest
from confluent_kafka import Producer

from baton.kafka.admin import delete_topics
from baton.kafka.control_log import write_control
from baton.kafka.markers import read_last_marker
from baton.records import ControlRecord, Slot, SlotSpec, SlotState
from baton.tools.churn import Churn
from baton.tools.verify import verify
from spark_apps.apps.click_windows import WATERMARK_DELAY_S, WINDOW_S, max_windows_in_state, window_start
from tests.support.slots import (
    kill_group,
    make_app,
    read_json_output,
    read_status,
    read_topic,
    start_slot,
    stop_slot,
    wait_until_emitted,
)

pytestmark = pytest.mark.integration

MODULE = "spark_apps.apps.click_windows"


@pytest.fixture
def windowed_app(bootstrap, tmp_path):
    """Factory: a fresh windowed app (own topics, slot blue active); its topics are deleted after."""
    made = []

    def make(max_records):
        app, path = make_app(bootstrap, tmp_path, module=MODULE, max_records=max_records, prefix="cw")
        made.append(app)
        write_control(
            bootstrap,
            ControlRecord(
                app=app.name,
                revision=1,
                epoch=1,
                active=Slot.BLUE,
                slots={Slot.BLUE: SlotSpec(SlotState.RUNNING, "v1")},
            ),
        )
        return app, path

    yield make
    for app in made:
        delete_topics(bootstrap, [t.name for t in app.topics()])


def check_values(records):
    """Every output value is a well-formed window of the record's key."""
    for key, v in records:
        assert key == f"{v['user_id']}@{v['window_start']}", (key, v)
        assert v["window_start"] == window_start(v["window_start"]), v
        assert v["window_end"] - v["window_start"] == WINDOW_S, v


def produce(bootstrap, topic, churn, n, partitions=None, extra=()):
    """Events 0..n-1 of `churn` (keyed by user, or round-robin over `partitions`), then `extra` raw
    values. -> ground truth: Counter of "user@window_start"."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    truth = Counter()
    for i in range(n):
        user, ts = churn.event(i)
        truth[f"{user}@{window_start(ts)}"] += 1
        if partitions:
            p.produce(topic, churn.value(i), user.encode(), partition=i % partitions)
        else:
            p.produce(topic, churn.value(i), user.encode())
    for value in extra:
        p.produce(topic, value, b"extra")
    assert p.flush(30) == 0
    return truth


def test_final_count_per_user_window_is_exact_through_a_kill_9(bootstrap, windowed_app, tmp_path):
    app, path = windowed_app(max_records=500)
    # Events up to 4 s out of order (well inside the watermark delay, so none is late), 60 event
    # seconds = 6 windows, users arriving and leaving.
    churn = Churn(rate=50, new_users_per_s=5, active_users=40, jitter_s=4)
    n = 3000
    assert churn.jitter_s < WATERMARK_DELAY_S - 2
    late_ts = churn.base_ts - 100  # its window closed long before it arrives: not counted
    bad = [b'{"user_id": "x", "timestamp": "yesterday"}', b"{broken"]
    truth = produce(
        bootstrap,
        app.input.topic,
        churn,
        n,
        extra=[json.dumps({"user_id": "late", "timestamp": late_ts}).encode(), *bad],
    )
    total = n + 1 + len(bad)
    proc = start_slot(bootstrap, path, tmp_path)
    try:
        # Kill -9 once a third of the input is out; the restart resumes from the checkpoint
        # (state and watermark) and replays the unfinished batch without emitting it twice.
        wait_until_emitted(bootstrap, app, n // 3)
        kill_group(proc)
        killed_at = sum(read_last_marker(bootstrap, app.commits_topic, app.name).emitted.values())
        assert killed_at < total, "the app finished before it was killed: the test proves nothing"
        proc = start_slot(bootstrap, path, tmp_path)
        wait_until_emitted(bootstrap, app, total, timeout_s=300)
        assert proc.poll() is None
    finally:
        code = stop_slot(proc)
    assert code == 0
    records = read_json_output(bootstrap, app.output.topic, app.output.partitions)
    check_values(records)
    # Update mode emits each changed window every batch: counts per key strictly increase
    # (a repeat is a duplicate emission) and the last one is the window's true count.
    verdict = verify(truth, [(k, v["count"]) for k, v in records])
    assert verdict.ok, verdict.summary()
    assert verdict.records > len(truth), "no window was updated across batches: the test proves nothing"
    assert not any(k.startswith("late@") for k, _ in records)
    dead = read_topic(bootstrap, app.dead_letter_topic, lambda m: m.value())
    assert sorted(dead) == sorted(bad)


def test_state_stays_bounded_under_steady_key_churn(bootstrap, windowed_app, tmp_path):
    partitions, max_records = 2, 400
    app, path = windowed_app(max_records=max_records)
    # 400 event seconds (40 windows); every second 10 new users arrive and 10 leave.
    churn = Churn(rate=20, new_users_per_s=10, active_users=50)
    n = churn.rate * 400
    truth = produce(bootstrap, app.input.topic, churn, n, partitions=partitions)
    # Round-robin production and admission control split by backlog make every batch a run of
    # max_records consecutive events (give or take one per partition): this many event seconds.
    batch_span_s = -(-(max_records + partitions) // churn.rate)
    bound = max_windows_in_state(batch_span_s) * churn.max_keys_per_window(WINDOW_S)
    keys_seen = len(truth)
    assert keys_seen >= 5 * bound, "too few keys for eviction to show: the test proves nothing"
    proc = start_slot(bootstrap, path, tmp_path)
    try:
        wait_until_emitted(bootstrap, app, n, timeout_s=300)
    finally:
        code = stop_slot(proc)
    assert code == 0
    batches = [s for s in read_status(bootstrap, app.name) if s.batch_id >= 0 and s.input_rows > 0]
    assert len(batches) >= n // max_records and sum(batches[-1].processed.values()) == n
    rows = [s.state_rows for s in batches]
    # Without eviction the state would hold every key seen so far (keys_seen by the end); with
    # it, at most the open windows' keys, all along the run.
    assert max(rows) <= bound, (bound, rows)
    assert max(rows) >= churn.active_users, f"state rows never reflected the open windows: {rows}"
    assert all(s.state_bytes > 0 for s in batches[-5:])
    verdict = verify(
        truth, [(k, v["count"]) for k, v in read_json_output(bootstrap, app.output.topic, app.output.partitions)]
    )
    assert verdict.ok, verdict.summary()
