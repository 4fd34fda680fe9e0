"""The click count with a state TTL, in its harness on the real broker and real Spark: a user idle for
the TTL starts a new count, exact through a kill -9 of the active and the standby's takeover; a restart
restores every row its slot left; the state holds only users seen lately; two slots that cut the same
input into other batches hold the same live state (digests agree); and a reprocess from the earliest
offsets, cut over with corrected output, ends with the same live state and output."""

import json
import time
from collections import defaultdict

import pytest
from confluent_kafka import Producer

from baton.apps import load_definition
from baton.checkpoints import last_committed_batch
from baton.control_plane import ControlPlane, KafkaControlStore
from baton.fence_gate import FenceGate
from baton.generations import slot_paths
from baton.handoff import with_fence
from baton.kafka.admin import delete_topics
from baton.kafka.control_log import write_control
from baton.kafka.markers import read_last_marker
from baton.records import ControlRecord, Slot, SlotSpec, SlotState
from baton.upgrade import restore_check
from spark_apps.apps import click_counts_ttl
from spark_apps.runtime.state.digests import live_rows
from spark_apps.runtime.state.invariant_check import check_state_at
from spark_apps.runtime.state.state_check import digest_state
from tests.support.slots import (
    kill_group,
    make_app,
    read_json_output,
    read_status,
    start_slot,
    stop_slot,
    wait_for,
    wait_until_emitted,
)

pytestmark = pytest.mark.integration

IDLE_S, DISORDER_S = 30, 5
# Recent event times: the records carry them as their timestamps, and a real broker's retention (7 days by
# default) deletes records stamped older than that as soon as they arrive.
BASE_TS = int(time.time()) // 3600 * 3600 - 3600
USERS, ON_S, PERIOD_S = 400, 15, 200  # each user clicks for 15 event seconds every 200: 3 lives in 600 s
RATE, SECONDS = 40, 600  # events per event second (24,000 events)


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
    app, path = make_app(bootstrap, tmp_path, module="spark_apps.apps.click_counts_ttl", max_records=600, prefix="ct")
    path.write_text(path.read_text() + f"state:\n  ttl: {{idle: {IDLE_S}s, on: event_time, disorder: {DISORDER_S}s}}\n")
    app = load_definition(path)
    write_control(
        bootstrap,
        ControlRecord(
            app=app.name,
            revision=1,
            epoch=1,
            active=Slot.BLUE,
            slots={Slot.BLUE: SlotSpec(SlotState.RUNNING, "v1"), Slot.GREEN: SlotSpec(SlotState.RUNNING, "v1")},
        ),
    )
    yield app, path
    delete_topics(bootstrap, [t.name for t in app.topics()])


def last_digest(bootstrap, app, slot, at, since_ms=0):
    return next(
        (
            s.state_digest
            for s in reversed(read_status(bootstrap, app.name, slot))
            if s.ts_ms >= since_ms and s.state_digest is not None and s.state_digest.at == at
        ),
        None,
    )


def live_digest(spark, app, tmp_path, slot: Slot, generation: int = 0) -> tuple[int, str]:
    """(rows, digest) of the live state in the slot's checkpoint, at its last batch."""
    checkpoint = slot_paths(tmp_path, app.name, slot, generation).checkpoint
    d = digest_state(spark, checkpoint, last_committed_batch(checkpoint), "end", live=live_rows(app, "check"))
    return d.rows, d.digest


def settled(check):
    """wait_for's answer for a baton Check: itself once met or failed, else None (look again)."""
    return check if check.met or check.failed else None


def test_idle_users_start_afresh_exactly_through_a_kill_9_a_restart_and_a_reprocess(
    bootstrap, ttl_app, tmp_path, spark
):
    app, path = ttl_app
    evs = events()
    truth = lives(evs)
    assert min(len(v) for v in truth.values()) >= 3, "users must come back after the TTL: the test proves nothing"
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for user, ts in evs:  # keyed: a user's clicks in one partition, in event-time order, sent when they happened
        p.produce(
            app.input.topic, json.dumps({"user_id": user, "timestamp": ts}).encode(), user.encode(), timestamp=ts * 1000
        )
    assert p.flush(30) == 0
    procs = {
        "blue": start_slot(bootstrap, path, tmp_path, "blue"),
        "green": start_slot(bootstrap, path, tmp_path, "green"),
    }  # green follows blue in batches of its own

    def restart(slot: str, **kw) -> int:
        since = int(time.time() * 1000)
        procs[slot] = start_slot(bootstrap, path, tmp_path, slot, **kw)
        return since

    def processed_all(slot: str) -> bool:
        s = read_status(bootstrap, app.name, slot)
        return bool(s) and sum(s[-1].processed.values()) == len(evs)

    try:
        wait_until_emitted(bootstrap, app, len(evs) // 4, timeout_s=300)
        # Green takes over when blue's lease lapses; blue restarts from its checkpoint (with the users it had
        # dropped) as the standby and follows green.
        kill_group(procs["blue"])
        assert sum(read_last_marker(bootstrap, app.commits_topic, app.name).emitted.values()) < len(evs)
        since = restart("blue")
        # Stopped while it catches up and started again, blue restores every row it left, users past their
        # TTL not yet dropped included (what it left is its query's own row count at its last batch).
        wait_for(
            "blue's first batch after its restart",
            lambda: any(
                s.ts_ms >= since and s.batch_id >= 0 and s.input_rows > 0
                for s in read_status(bootstrap, app.name, "blue")
            ),
            timeout_s=180,
            procs=(procs["blue"],),
        )
        assert stop_slot(procs["blue"]) == 0
        left = last_digest(bootstrap, app, "blue", "stop", since)
        assert left is not None and left.rows > 0
        since = restart("blue")
        restored = wait_for(
            "blue's restore check",
            lambda: settled(restore_check(left, read_status(bootstrap, app.name, "blue"), since)),
            timeout_s=180,
            procs=(procs["blue"],),
        )
        assert restored.met, restored.message

        wait_until_emitted(bootstrap, app, len(evs), timeout_s=300)
        for slot in ("blue", "green"):
            wait_for(
                f"{slot} to process every event",
                lambda slot=slot: processed_all(slot),
                timeout_s=300,
                procs=(procs[slot],),
            )

        # Output: each user's last count is their current life's, not every click they ever made.
        def wrong_counts():
            last = dict(
                (key, value["count"])
                for key, value in read_json_output(bootstrap, app.output.topic, app.output.partitions)
            )
            assert len(last) == len(truth) and sum(last.values()) < len(evs) / 2  # earlier lives forgotten
            return {u: (last.get(u), v) for u, v in truth.items() if last.get(u) != v[-1]}

        wrong = wrong_counts()
        assert not wrong, f"{len(wrong)} users' counts wrong (got, lives): {sorted(wrong.items())[:10]}"

        # State: only the users seen within idle + disorder + a batch of event time, never all the users.
        batches = [
            s
            for slot in ("blue", "green")
            for s in read_status(bootstrap, app.name, slot)
            if s.batch_id >= 0 and s.input_rows > 0
        ]
        batch_span_s = -(-app.max_records_per_trigger // RATE) + 1
        recent = max(
            len({u for t in range(max(0, t0 - IDLE_S - DISORDER_S - 2 * batch_span_s), t0 + 1) for u in active(t)})
            for t0 in range(SECONDS)
        )
        assert max(s.state_rows for s in batches) <= recent < USERS / 2, (recent, [s.state_rows for s in batches])

        # The two slots' batches differed, so they dropped users at different points; the users alive at
        # the end are the same, with the same counts.
        ends = {
            slot: [s.processed for s in read_status(bootstrap, app.name, slot) if s.batch_id >= 0 and s.input_rows > 0]
            for slot in ("blue", "green")
        }
        assert ends["blue"] != ends["green"]  # other batch boundaries
        assert stop_slot(procs["blue"]) == 0
        uninterrupted = live_digest(spark, app, tmp_path, Slot.GREEN)
        assert uninterrupted[0] > 0 and uninterrupted == live_digest(spark, app, tmp_path, Slot.BLUE), uninterrupted

        # A reprocess, as baton_reprocess does it: blue starts a new generation from the earliest offsets,
        # follows green to the end (nothing more arrives: the fence is green's end) and takes over with
        # corrected output. Its live state and the output are the uninterrupted run's.
        plane = ControlPlane(KafkaControlStore(bootstrap), writer="test")
        plane.move_slot(app.name, Slot.BLUE, SlotState.STARTING, generation=1, reason="test: reprocess")
        restart("blue", generation=1)
        fence = read_last_marker(bootstrap, app.commits_topic, app.name).emitted
        epoch = plane.current(app.name).epoch
        plane.update(app.name, with_fence(fence, epoch=epoch, by="test"))
        gate = FenceGate(
            plane,
            app.name,
            Slot.BLUE,
            epoch,
            fence,
            lambda: read_last_marker(bootstrap, app.commits_topic, app.name),
            lambda: read_status(bootstrap, app.name, "green"),
            lambda: read_status(bootstrap, app.name, "blue"),
            trail_records=app.max_lag_records,
            correct=True,
        )
        cut = wait_for(
            "the cutover to the new generation",
            lambda: settled(gate.look()),
            timeout_s=300,
            procs=tuple(procs.values()),
        )
        assert cut.met, cut.message
        wait_for(
            "the corrected output",
            lambda: read_last_marker(bootstrap, app.commits_topic, app.name).corrected_epoch == epoch + 1,
            timeout_s=120,
            procs=tuple(procs.values()),
        )
        wait_for("blue to process every event", lambda: processed_all("blue"), timeout_s=120, procs=(procs["blue"],))
        wrong = wrong_counts()
        assert not wrong, f"after the reprocess, {len(wrong)} users' counts wrong: {sorted(wrong.items())[:10]}"
    finally:
        codes = {slot: stop_slot(proc) for slot, proc in procs.items()}
    assert codes == {"blue": 0, "green": 0}
    assert live_digest(spark, app, tmp_path, Slot.BLUE, generation=1) == uninterrupted
    # The reprocess's invariant check (the standby runs the app's check_state when baton_reprocess asks)
    # reads the same state.
    checkpoint = slot_paths(tmp_path, app.name, Slot.BLUE, 1).checkpoint
    rows, violations, examples, _ = check_state_at(
        spark, click_counts_ttl, checkpoint, last_committed_batch(checkpoint)
    )
    assert rows > 0 and (violations, examples) == (0, [])
