"""Invariant 2 with both slots running as real processes: the standby (follow mode) never passes what
the active has emitted, and a fence stops both slots at exactly the fence offsets."""

import dataclasses
import json
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, TopicPartition

from baton.kafka.control_log import read_control, write_control
from baton.kafka.markers import read_last_marker
from baton.records import CommitMarker, Slot, covers
from baton.tools.verify import read_output, verify
from baton.upgrade import Policy, states_agree
from baton_airflow.triggers.upgrade import StateCheckTrigger
from tests.support.slots import produce_clicks, read_status, read_topic, start_slot, stop_slot, wait_for

pytestmark = pytest.mark.integration


def markers(bootstrap, app):
    key = app.name.encode()
    return read_topic(
        bootstrap, app.commits_topic, lambda m: CommitMarker.from_bytes(m.value()) if m.key() == key else None
    )


def last_processed(bootstrap, app, slot):
    done = [s for s in read_status(bootstrap, app.name, slot) if s.batch_id >= 0]
    return done[-1] if done else None


def truth_below(bootstrap, topic, fence):
    """Ground truth per user from the input records below the fence offsets."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "enable.auto.commit": False})
    truth = Counter()
    try:
        for p, end in fence.items():
            c.assign([TopicPartition(topic, p, 0)])
            pos = 0
            while pos < end:
                for m in c.consume(min(10_000, end - pos), 5):
                    if m.error() or m.offset() >= end:
                        continue
                    pos = m.offset() + 1
                    try:
                        truth[json.loads(m.value())["user_id"]] += 1
                    except (ValueError, KeyError):
                        pass
    finally:
        c.close()
    return truth


def both_running_with_input(bootstrap, app, path, tmp_path):
    """24,000 clicks waiting, both slots started (blue active)."""
    produce_clicks(bootstrap, app.input.topic, 24_000, users=400)
    return start_slot(bootstrap, path, tmp_path, "blue"), start_slot(bootstrap, path, tmp_path, "green")


def ahead_of_both(bootstrap, app, procs):
    """Mid-stream, a position still ahead of both slots: at most one batch (max 2000 records) is
    planned beyond the last marker, so 3000 beyond it on every partition is."""
    first = wait_for(
        "the active to emit a few batches",
        lambda: (
            (m := read_last_marker(bootstrap, app.commits_topic, app.name)) and sum(m.emitted.values()) >= 4_000 and m
        ),
        procs=procs,
    )
    return {p: first.emitted.get(p, 0) + 3_000 for p in range(app.input.partitions)}


def test_standby_follows_and_never_passes_the_active(bootstrap, both_slots_app, tmp_path):
    app, path = both_slots_app
    truth, _ = produce_clicks(bootstrap, app.input.topic, 12_000, users=300)
    blue = start_slot(bootstrap, path, tmp_path, "blue")
    green = start_slot(bootstrap, path, tmp_path, "green")
    try:
        done = wait_for(
            "the active to emit all input",
            lambda: (
                (m := read_last_marker(bootstrap, app.commits_topic, app.name))
                and sum(m.emitted.values()) == 12_000
                and m
            ),
            procs=(blue, green),
        )
        wait_for(
            "the standby to catch up with the active",
            lambda: (s := last_processed(bootstrap, app, "green")) and s.processed == done.emitted,
            procs=(blue, green),
        )
        # The active stops; new input arrives. The standby must stay exactly where the active stopped.
        assert stop_slot(blue) == 0
        stopped_at = read_last_marker(bootstrap, app.commits_topic, app.name).emitted
        produce_clicks(bootstrap, app.input.topic, 4_000, users=300, start=12_000)
        time.sleep(8)  # ~25 of the standby's triggers with input waiting
        assert green.poll() is None
        assert last_processed(bootstrap, app, "green").processed == stopped_at
    finally:
        stop_slot(blue)
        assert stop_slot(green) == 0
    # Throughout the run, every position the standby reported had been emitted by the active before.
    history = markers(bootstrap, app)
    assert history and all(m.slot is Slot.BLUE for m in history)
    statuses = [s for s in read_status(bootstrap, app.name, "green") if s.batch_id >= 0]
    assert len(statuses) >= 2
    for s in statuses:
        if not any(s.processed.values()):
            continue  # nothing read yet: trivially behind
        assert any(m.ts_ms <= s.ts_ms and covers(m.emitted, s.processed) for m in history), (
            f"standby batch {s.batch_id} at {s.processed} was ahead of the active's emitted position"
        )
    # The standby holds the same state and wrote nothing: the output is exactly the active's.
    assert statuses[-1].state_rows == len(truth)
    verdict = verify(truth, read_output(bootstrap, app.output.topic, app.output.partitions))
    assert verdict.ok, verdict.summary()


def test_a_fence_stops_both_slots_at_exactly_the_fence(bootstrap, both_slots_app, tmp_path):
    app, path = both_slots_app
    blue, green = both_running_with_input(bootstrap, app, path, tmp_path)
    try:
        fence = ahead_of_both(bootstrap, app, (blue, green))
        current = read_control(bootstrap, app.name)
        write_control(bootstrap, dataclasses.replace(current, revision=current.revision + 1, fence=fence))
        wait_for(
            "the active to emit up to the fence",
            lambda: read_last_marker(bootstrap, app.commits_topic, app.name).emitted == fence,
            procs=(blue, green),
        )
        wait_for(
            "the standby to reach the fence",
            lambda: (s := last_processed(bootstrap, app, "green")) and s.processed == fence,
            procs=(blue, green),
        )
        time.sleep(6)  # input is waiting beyond the fence: neither slot may read on
        assert read_last_marker(bootstrap, app.commits_topic, app.name).emitted == fence
        assert last_processed(bootstrap, app, "blue").processed == fence
        assert last_processed(bootstrap, app, "green").processed == fence
        # Asked for a state check at a position both passed (here F), the standby digests its state and
        # the active's (from the active's checkpoint) after each one's batch that ended there: same
        # input, same state, whatever the batch boundaries were (the rolling upgrade's state check).
        current = read_control(bootstrap, app.name)
        write_control(bootstrap, dataclasses.replace(current, revision=current.revision + 1, check_at=fence))
        at_fence = {
            "green": wait_for(
                f"green's state digest at {fence}",
                lambda: (
                    (s := last_processed(bootstrap, app, "green"))
                    and s.state_digest
                    and s.state_digest.at == "check"
                    and s.state_digest.position == fence
                    and s.state_digest
                ),
                procs=(blue, green),
            ),
            "blue": wait_for(
                f"green's digest of blue's state at {fence}",
                lambda: (
                    (s := last_processed(bootstrap, app, "green"))
                    and s.active_digest
                    and s.active_digest.at == "check"
                    and s.active_digest.position == fence
                    and s.active_digest
                ),
                procs=(blue, green),
            ),
        }
        assert at_fence["blue"].batch_id == last_processed(bootstrap, app, "blue").batch_id  # blue's own batch
    finally:
        assert stop_slot(blue) == 0
        assert stop_slot(green) == 0
    # Both slots hold the state of exactly the input below the fence; the output is exactly that input.
    truth = truth_below(bootstrap, app.input.topic, fence)
    assert sum(truth.values()) == sum(fence.values())
    assert last_processed(bootstrap, app, "green").state_rows == len(truth)
    assert last_processed(bootstrap, app, "blue").state_rows == len(truth)
    assert at_fence["blue"].rows == at_fence["green"].rows == len(truth)
    assert at_fence["blue"].digest == at_fence["green"].digest
    # The active took no digest of its own: its batches kept both task slots.
    assert not [s for s in read_status(bootstrap, app.name, "blue") if s.state_digest and s.state_digest.at == "check"]
    verdict = verify(truth, read_output(bootstrap, app.output.topic, app.output.partitions))
    assert verdict.ok, verdict.summary()


def test_a_state_check_position_is_a_batch_boundary_both_slots_digest_and_read_on_from(
    bootstrap, both_slots_app, tmp_path, monkeypatch
):
    """The rolling upgrade's state check: asked for their state at a position P ahead of them, both
    slots end a batch exactly at P, digest the state there, and go on reading: no stop, no fence."""
    app, path = both_slots_app
    blue, green = both_running_with_input(bootstrap, app, path, tmp_path)
    try:
        check = ahead_of_both(bootstrap, app, (blue, green))
        current = read_control(bootstrap, app.name)
        write_control(bootstrap, dataclasses.replace(current, revision=current.revision + 1, check_at=check))
        checked = wait_for(
            f"the standby's digests of both states at {check}",
            lambda: (
                (
                    v := states_agree(
                        read_status(bootstrap, app.name, "blue"),
                        read_status(bootstrap, app.name, "green"),
                        check,
                        Policy.EXACT,
                    )
                ).met
                and v
            ),
            procs=(blue, green),
        )
        assert "schema and digest agree" in checked.message
        green_status = read_status(bootstrap, app.name, "green")
        digests = {
            "green": next(
                s.state_digest
                for s in green_status
                if s.state_digest is not None and s.state_digest.at == "check" and s.state_digest.position == check
            ),
            "blue": next(
                s.active_digest
                for s in green_status
                if s.active_digest is not None and s.active_digest.at == "check" and s.active_digest.position == check
            ),
        }
        # Past P both read on: the active emits all the input, the standby follows it to the end.
        done = wait_for(
            "the active to emit all input",
            lambda: (
                (m := read_last_marker(bootstrap, app.commits_topic, app.name))
                and sum(m.emitted.values()) == 24_000
                and m
            ),
            procs=(blue, green),
        )
        wait_for(
            "the standby to follow to the end",
            lambda: (s := last_processed(bootstrap, app, "green")) and s.processed == done.emitted,
            procs=(blue, green),
        )
        # A position both read past within a batch (one before P on every partition): the standby says
        # so of both, and the state check fails at once with the reason instead of waiting for its timeout.
        inside = {p: o - 1 for p, o in check.items()}
        current = read_control(bootstrap, app.name)
        write_control(bootstrap, dataclasses.replace(current, revision=current.revision + 1, check_at=inside))
        missed = wait_for(
            "both slots to say they passed it",
            lambda: (
                (
                    v := states_agree(
                        read_status(bootstrap, app.name, "blue"),
                        read_status(bootstrap, app.name, "green"),
                        inside,
                        Policy.EXACT,
                    )
                ).failed
                and v
            ),
            procs=(blue, green),
        )
        assert "read past the check position" in missed.message
        # The rolling upgrade's gate (the real trigger, on the real slots) asks again at once, further
        # ahead of the input (no input arrives: at the end both slots stand at), and both digest there.
        monkeypatch.setenv("BATON_APPS_DIR", str(tmp_path))
        trigger = StateCheckTrigger(app=app.name, slot="green", bootstrap=bootstrap, target=inside, ahead_s=1.0)
        moved = trigger.check()
        assert moved.waiting and "asked again" in moved.message, moved
        assert read_control(bootstrap, app.name).check_at == done.emitted and trigger.moves == 1
        agreed = wait_for(
            "the digests at the position asked again", lambda: (c := trigger.check()).met and c, procs=(blue, green)
        )
        assert "schema and digest agree" in agreed.message
    finally:
        assert stop_slot(blue) == 0
        assert stop_slot(green) == 0
    # Each digest is of the batch that ended exactly at P, and both hold the state of the input below P.
    for slot in ("blue", "green"):
        ends = {s.batch_id: s.processed for s in read_status(bootstrap, app.name, slot) if s.batch_id >= 0}
        assert ends[digests[slot].batch_id] == check, slot
    truth = truth_below(bootstrap, app.input.topic, check)
    assert digests["blue"].rows == digests["green"].rows == len(truth)
    assert digests["blue"].digest == digests["green"].digest
