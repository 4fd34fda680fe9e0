"""The click count with a state TTL, in its harness on the real broker and real Spark: a user idle for
the TTL starts a new count, exact through a kill -9 of the active and the standby's takeover; the state
holds only users seen lately; and two slots that cut the same input into other batches hold the same live
state (digests agree)."""

import json
import time
from collections import defaultdict

import pytest
from confluent_kafka import Producer

from baton.apps import load_definition
from baton.kafka.admin import delete_topics
from baton.kafka.control_log import write_control
from baton.records import ControlRecord, Slot, SlotSpec, SlotState
from spark_apps.runtime.harness import live_rows, slot_paths
from spark_apps.runtime.kafka_sink import read_last_marker
from spark_apps.runtime.state_check import digest_state, last_committed_batch
from tests.support.slots import (
    kill_group, make_app, read_json_output, read_status, start_slot, stop_slot, wait_for, wait_until_emitted,
)

pytestmark = pytest.mark.integration

IDLE_S, DISORDER_S = 30, 5
# Recent event times: the records carry them as their timestamps, and a real broker's retention (7 days by
# default) deletes records stamped older than that as soon as they arrive.
BASE_TS = int(time.time()) // 3600 * 3600 - 3600
USERS, ON_S, PERIOD_S = 600, 15, 200  # each user clicks for 15 event seconds every 200: 3 lives in 600 s
RATE, SECONDS = 60, 600               # events per event second


def active(t: int) -> list[int]:
    return [u for u in range(USERS) if (t + u * 7) % PERIOD_S < ON_S]


def events() -> list[tuple[str, int]]:
    """(user, event second) in event-time order: RATE a second over the users active that second."""
    out = []
    for t in range(SECONDS):
        users = active(t)
        out += [(f"u{users[(t * RATE + k) % len(users)]}", BASE_TS + t) for k in range(RATE)]
    return out


def lives(evs) -> dict[str, list[int]]:
    """Per user, the count of each life: a gap of more than IDLE_S seconds starts a new one."""
    last, out = {}, defaultdict(list)
    for user, ts in evs:
        if user not in last or ts - last[user] > IDLE_S:
            out[user].append(0)
        out[user][-1] += 1
        last[user] = ts
    return out


@pytest.fixture
def ttl_app(bootstrap, tmp_path):
    app, path = make_app(bootstrap, tmp_path, module="spark_apps.apps.click_counts_ttl", max_records=400, prefix="ct")
    path.write_text(path.read_text() + f"state:\n  ttl: {{idle: {IDLE_S}s, on: event_time, disorder: {DISORDER_S}s}}\n")
    app = load_definition(path)
    write_control(bootstrap, ControlRecord(app=app.name, revision=1, epoch=1, active=Slot.BLUE, slots={
        Slot.BLUE: SlotSpec(SlotState.RUNNING, "v1"), Slot.GREEN: SlotSpec(SlotState.RUNNING, "v1")}))
    yield app, path
    delete_topics(bootstrap, [t.name for t in app.topics()])


def test_idle_users_start_afresh_exactly_through_a_kill_9_and_both_slots_hold_the_same_live_state(
        bootstrap, ttl_app, tmp_path, spark):
    app, path = ttl_app
    evs = events()
    truth = lives(evs)
    assert min(len(v) for v in truth.values()) >= 3, "users must come back after the TTL: the test proves nothing"
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for user, ts in evs:  # keyed: a user's clicks in one partition, in event-time order, sent when they happened
        p.produce(app.input.topic, json.dumps({"user_id": user, "timestamp": ts}).encode(), user.encode(),
                  timestamp=ts * 1000)
    assert p.flush(30) == 0
    blue = start_slot(bootstrap, path, tmp_path, "blue")
    green = start_slot(bootstrap, path, tmp_path, "green")  # the standby: follows blue in batches of its own
    try:
        wait_until_emitted(bootstrap, app, len(evs) // 3, timeout_s=300)
        # Green takes over when blue's lease lapses; blue restarts from its checkpoint (with the users it had
        # dropped) as the standby and follows green.
        kill_group(blue)
        assert sum(read_last_marker(bootstrap, app.commits_topic, app.name).emitted.values()) < len(evs)
        blue = start_slot(bootstrap, path, tmp_path, "blue")
        wait_until_emitted(bootstrap, app, len(evs), timeout_s=300)
        for slot, proc in (("blue", blue), ("green", green)):
            wait_for(f"{slot} to process every event",
                     lambda slot=slot: (s := read_status(bootstrap, app.name, slot)) and sum(s[-1].processed.values()) == len(evs),
                     timeout_s=300, procs=(proc,))
    finally:
        codes = stop_slot(blue), stop_slot(green)
    assert codes == (0, 0)

    # Output: each user's last count is their current life's, not every click they ever made.
    last = {}
    for key, value in read_json_output(bootstrap, app.output.topic, app.output.partitions):
        last[key] = value["count"]
    wrong = {u: (last.get(u), v) for u, v in truth.items() if last.get(u) != v[-1]}
    assert not wrong and len(last) == len(truth), f"{len(wrong)} users' counts wrong (got, lives): {sorted(wrong.items())[:10]}"
    assert sum(last.values()) < len(evs) / 2  # the counts forgot the users' earlier lives

    # State: only the users seen within idle + disorder + a batch of event time, never all the users.
    batches = [s for slot in ("blue", "green") for s in read_status(bootstrap, app.name, slot)
               if s.batch_id >= 0 and s.input_rows > 0]
    batch_span_s = -(-app.max_records_per_trigger // RATE) + 1
    recent = max(len({u for t in range(max(0, t0 - IDLE_S - DISORDER_S - 2 * batch_span_s), t0 + 1) for u in active(t)})
                 for t0 in range(SECONDS))
    assert max(s.state_rows for s in batches) <= recent < USERS / 2, (recent, [s.state_rows for s in batches])

    # The two slots' batches differed, so they dropped users at different points; the users alive at the
    # end are the same, with the same counts.
    digests = []
    for slot in (Slot.BLUE, Slot.GREEN):
        checkpoint = slot_paths(tmp_path, app.name, slot, 0).checkpoint
        digests.append(digest_state(spark, checkpoint, last_committed_batch(checkpoint), "end", live=live_rows(app)))
    assert digests[0].rows > 0 and (digests[0].rows, digests[0].digest) == (digests[1].rows, digests[1].digest), digests
    ends = {slot: [s.processed for s in read_status(bootstrap, app.name, slot) if s.batch_id >= 0 and s.input_rows > 0]
            for slot in ("blue", "green")}
    assert ends["blue"] != ends["green"]  # other batch boundaries
