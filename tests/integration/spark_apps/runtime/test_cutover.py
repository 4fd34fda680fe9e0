"""A cutover under live load with both slots as real processes: fence ahead of the input, the active
stops at exactly F, and one write hands the role to the standby (epoch + 1) and lifts the fence while
the standby is still short of F (held back on purpose): it reaches F as the new active, a batch ending
exactly there, and emits from F. The output read back (read-committed) equals ground truth: 0 lost,
0 duplicated, 0 wrong; and the markers show blue wrote up to F at epoch 1, green from F at epoch 2."""

import os
import signal
import threading
import time

import pytest

from baton.control_plane import ControlPlane, KafkaControlStore
from baton.fence_gate import FenceGate, holds_fence
from baton.generations import slot_paths
from baton.handoff import cut_over, fence_reached, plan_fence, saw_epoch, with_fence, without_fence
from baton.kafka.markers import read_last_marker
from baton.kafka.tail import end_offsets
from baton.records import CommitMarker, Slot, covers
from baton.tools.verify import read_output, verify
from tests.support.late_position import fault_file
from tests.support.slots import (
    produce_clicks,
    read_status,
    read_topic,
    start_slot,
    stop_slot,
    wait_for,
    wait_until_emitted,
    wait_until_following,
)

pytestmark = pytest.mark.integration


class Load(threading.Thread):
    """Clicks in rounds of `per_round` every `every_s`, until stopped; keeps the ground truth."""

    def __init__(self, bootstrap, topic, per_round=400, every_s=0.2, users=300):
        super().__init__(daemon=True)
        self.args = bootstrap, topic, per_round, every_s
        self.users = users  # may be changed while it runs
        self.truth, self.sent = None, 0
        self.done = threading.Event()

    def run(self):
        bootstrap, topic, per_round, every_s = self.args
        from collections import Counter

        self.truth = Counter()
        while not self.done.is_set():
            part, _ = produce_clicks(bootstrap, topic, per_round, users=self.users, start=self.sent)
            self.truth.update(part)
            self.sent += per_round
            time.sleep(every_s)


def markers_by_slot(bootstrap, app):
    """The app's commit markers in order: all, blue's, green's."""
    key = app.name.encode()
    marks = read_topic(
        bootstrap, app.commits_topic, lambda m: CommitMarker.from_bytes(m.value()) if m.key() == key else None
    )
    return marks, [m for m in marks if m.slot is Slot.BLUE], [m for m in marks if m.slot is Slot.GREEN]


def test_cutover_under_load_is_exactly_once_and_moves_the_writer(bootstrap, both_slots_app, tmp_path):
    app, path = both_slots_app
    (tmp_path / "state").mkdir()
    blue = start_slot(bootstrap, path, tmp_path / "state", "blue")
    green = start_slot(bootstrap, path, tmp_path / "state", "green")
    procs = (blue, green)
    load = Load(bootstrap, app.input.topic)
    try:
        load.start()
        wait_until_emitted(bootstrap, app, 4000, timeout_s=240)
        wait_until_following(bootstrap, app, "green", procs)
        plane = ControlPlane(KafkaControlStore(bootstrap), writer="test")
        partitions = range(app.input.partitions)

        # 1. Fence ahead of the input by ~2 s of arrivals (2,000 events/s).
        active = [s for s in read_status(bootstrap, app.name, "blue") if s.batch_id >= 0][-1]
        fence = plan_fence(
            end_offsets(bootstrap, app.input.topic, partitions),
            active.processed,
            rate_per_s=2000,
            ahead_s=2,
            partitions=app.input.partitions,
        )
        fenced = plane.update(app.name, with_fence(fence, epoch=1))

        # 2. Blue stops at exactly F (the load keeps going past it). Green is held back meanwhile
        #    (SIGSTOP), so it is still short of F when the role moves: the cutover does not wait for it.
        os.killpg(green.pid, signal.SIGSTOP)
        try:

            def blue_at_fence():
                held = holds_fence(read_status(bootstrap, app.name, "blue"), fence, "")  # its word, then its marker
                check = fence_reached(
                    read_last_marker(bootstrap, app.commits_topic, app.name),
                    read_status(bootstrap, app.name, "green"),
                    fence,
                    epoch=1,
                    active_holds=held,
                    trail_records=app.max_lag_records,
                )
                assert not check.failed, check.message
                return check.met

            wait_for("blue at the fence", blue_at_fence, 120, procs)
            time.sleep(2)  # a fenced active stays put although input keeps arriving
            assert read_last_marker(bootstrap, app.commits_topic, app.name).emitted == fence
            short = [s for s in read_status(bootstrap, app.name, "green") if s.batch_id >= 0][-1].processed
            assert not covers(short, fence), (short, fence)

            # 3. Cut over: green active at epoch 2, fence lifted, in one write; blue follows as the standby.
            cut = plane.update(app.name, cut_over(Slot.GREEN, from_epoch=1))
            assert (cut.epoch, cut.active, cut.fence) == (2, Slot.GREEN, None) and cut.revision > fenced.revision
        finally:
            os.killpg(green.pid, signal.SIGCONT)
        # Green reaches F first, a batch ending exactly there (its output, blue's, is not written again).
        wait_for(
            "green at the fence",
            lambda: any(s.processed == fence for s in read_status(bootstrap, app.name, "green") if s.batch_id >= 0),
            120,
            procs,
        )
        wait_for(
            "blue to see epoch 2", lambda: saw_epoch(read_status(bootstrap, app.name, "blue"), 2, cut.ts_ms), 60, procs
        )

        time.sleep(3)
        load.done.set()
        load.join()
        wait_until_emitted(bootstrap, app, load.sent, timeout_s=240)
        verdict = verify(load.truth, read_output(bootstrap, app.output.topic, app.output.partitions))
        assert verdict.ok, verdict.summary()

        marks, by_blue, by_green = markers_by_slot(bootstrap, app)
        assert by_blue and all(m.epoch == 1 for m in by_blue) and by_blue[-1].emitted == fence
        assert by_green and all(m.epoch == 2 for m in by_green)
        assert marks.index(by_green[0]) > marks.index(by_blue[-1])  # no interleaving: one writer at a time
        # Both slots still run: the old active is now the hot standby.
        assert blue.poll() is None and green.poll() is None
        assert read_status(bootstrap, app.name, "blue")[-1].epoch_seen == 2
        # A plain cutover asks for no state check: no slot ran a digest job beside the new active's batch.
        for slot in ("blue", "green"):
            assert not [
                s
                for s in read_status(bootstrap, app.name, slot)
                if s.state_digest is not None and s.state_digest.at == "fence"
            ], slot
    finally:
        load.done.set()
        for p in procs:
            stop_slot(p)


def test_a_corrected_output_cutover_to_a_trailing_standby_leaves_every_key_corrected(
    bootstrap, both_slots_app, tmp_path
):
    """Blue runs a buggy version (users ending in 7 counted twice), green the fix, following blue. The
    cutover asks for corrected output and is written, by the FenceGate, while green is held short
    of F: green reaches F as the new active, emits from there at once, and publishes its state at a
    batch at or past F, less the keys it emitted since, in a transaction of its own. From the fence on
    the load clicks for 40 of the 300 users only: most keys get their corrected value from the
    correction alone, the 40 from green's batches (a state read older than those is left out for them;
    tests/unit/spark_apps/runtime/test_correction.py times a batch inside the read). The compacted view
    must be the ground truth for every key."""
    app, path = both_slots_app
    (tmp_path / "v1").mkdir()
    buggy = tmp_path / "v1" / path.name  # an app definition is named after its app
    buggy.write_text(
        path.read_text().replace("module: spark_apps.apps.click_counts", "module: tests.support.buggy_counts")
    )
    (tmp_path / "state").mkdir()
    blue = start_slot(bootstrap, buggy, tmp_path / "state", "blue")
    green = start_slot(bootstrap, path, tmp_path / "state", "green")
    procs = (blue, green)
    load = Load(bootstrap, app.input.topic)
    key = app.name.encode()

    def markers():
        return read_topic(
            bootstrap, app.commits_topic, lambda m: CommitMarker.from_bytes(m.value()) if m.key() == key else None
        )

    try:
        load.start()
        wait_until_emitted(bootstrap, app, 4000, timeout_s=240)
        wait_until_following(bootstrap, app, "green", procs)
        plane = ControlPlane(KafkaControlStore(bootstrap), writer="test")
        active = [s for s in read_status(bootstrap, app.name, "blue") if s.batch_id >= 0][-1]
        fence = plan_fence(
            end_offsets(bootstrap, app.input.topic, range(app.input.partitions)),
            active.processed,
            rate_per_s=2000,
            ahead_s=2,
            partitions=app.input.partitions,
        )
        plane.update(app.name, with_fence(fence, epoch=1, by="test"))
        load.users = 40
        os.killpg(green.pid, signal.SIGSTOP)
        try:
            gate = FenceGate(
                plane,
                app.name,
                Slot.GREEN,
                1,
                fence,
                lambda: read_last_marker(bootstrap, app.commits_topic, app.name),
                lambda: read_status(bootstrap, app.name, "blue"),
                lambda: read_status(bootstrap, app.name, "green"),
                trail_records=app.max_lag_records,
                correct=True,
            )

            def cut():
                check = gate.look()
                assert not check.failed, check.message
                return check.met

            wait_for("the cutover at the fence", cut, 120, procs)
            short = [s for s in read_status(bootstrap, app.name, "green") if s.batch_id >= 0][-1].processed
            assert not covers(short, fence), (short, fence)  # green trailed F when the role moved
        finally:
            os.killpg(green.pid, signal.SIGCONT)
        wait_for(
            "green's first batch past F",
            lambda: any(m.epoch == 2 and m.emitted != fence for m in markers()),
            120,
            procs,
        )
        load.done.set()
        load.join()
        wait_for("the corrected output", lambda: any(m.corrected_epoch == 2 for m in markers()), 120, procs)
        wait_until_emitted(bootstrap, app, load.sent, timeout_s=240)
        assert dict(read_output(bootstrap, app.output.topic, app.output.partitions)) == dict(load.truth)
        assert sum(1 for u in load.truth if u.endswith("7")) == 30  # the bug touched 30 users' counts

        marks = markers()
        by_blue = [m for m in marks if m.slot is Slot.BLUE]
        correction = next(m for m in marks if m.corrected_epoch == 2)
        assert by_blue[-1].emitted == fence and all(m.epoch == 1 and m.corrected_epoch == 0 for m in by_blue)
        assert covers(correction.emitted, fence) and correction.slot is Slot.GREEN
        # Green emitted past F before its correction (the output did not wait for it), and every marker
        # after the correction carries it on.
        first_past = next(m for m in marks if m.epoch == 2 and m.emitted != fence)
        assert marks.index(first_past) < marks.index(correction)
        assert all(m.corrected_epoch == 2 for m in marks[marks.index(correction) :])
    finally:
        load.done.set()
        for p in procs:
            stop_slot(p)


def settled(check):
    """wait_for's answer for a baton Check: itself once met or failed, else None (look again)."""
    return check if check.met or check.failed else None


def test_an_idle_active_at_the_fence_is_handed_over_only_once_it_holds_there(bootstrap, late_position_app, tmp_path):
    """A fence planned in an input pause lies at the input's end, where the idle active's marker already
    stands. Seen in CI (the rolled-back upgrade): the cutover was written on that marker alone, input
    resumed before the fence reached the active, which emitted past F at the old epoch after the role
    had moved. The gate (baton.fence_gate) waits for the active's word that it holds at F.
    1. Blue never sees the fence (the test fault tests.support.late_position): however long its
       marker stands at F, no cutover; once input resumes blue emits past F, the gate fails, nothing moved.
    2. Blue sees the next fence, at the input's end again: its word comes, the cutover is written in the
       pause, and the input that follows is green's to emit, from F. The output equals the ground truth."""
    app, path = late_position_app
    state = tmp_path / "state"
    state.mkdir()
    blue = start_slot(bootstrap, path, state, "blue")
    green = start_slot(bootstrap, path, state, "green")
    procs = (blue, green)
    partitions = range(app.input.partitions)
    plane = ControlPlane(KafkaControlStore(bootstrap), writer="test")

    def gate(fence):
        return FenceGate(
            plane,
            app.name,
            Slot.GREEN,
            1,
            fence,
            lambda: read_last_marker(bootstrap, app.commits_topic, app.name),
            lambda: read_status(bootstrap, app.name, "blue"),
            lambda: read_status(bootstrap, app.name, "green"),
            trail_records=app.max_lag_records,
        )

    try:
        truth, _ = produce_clicks(bootstrap, app.input.topic, 2000, users=300)
        wait_until_emitted(bootstrap, app, 2000, timeout_s=240)
        wait_until_following(bootstrap, app, "green", procs)

        # 1. A fence blue does not see.
        fault = fault_file(slot_paths(state, app.name, Slot.BLUE, 0))
        fault.write_text("fence\n")
        unseen = end_offsets(bootstrap, app.input.topic, partitions)
        plane.update(app.name, with_fence(unseen, epoch=1, by="unseen"))
        assert read_last_marker(bootstrap, app.commits_topic, app.name).emitted == unseen  # blue stands at F
        looking = gate(unseen)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            check = looking.look()
            assert not check.met and not check.failed, check.message
            time.sleep(0.2)
        assert "its word that it holds there" in check.message and not fault.exists()
        more, _ = produce_clicks(bootstrap, app.input.topic, 1000, users=300, start=2000)
        truth.update(more)
        passed = wait_for("blue past the fence it did not see", lambda: settled(looking.look()), 120, procs)
        assert passed.failed and "emitted past the fence" in passed.message, passed.message
        plane.update(app.name, without_fence(1, by="unseen"))
        assert plane.current(app.name).active is Slot.BLUE
        wait_until_emitted(bootstrap, app, 3000, timeout_s=240)

        # 2. A fence blue sees, in a pause again: the cutover, then input.
        fence = end_offsets(bootstrap, app.input.topic, partitions)
        plane.update(app.name, with_fence(fence, epoch=1, by="seen"))
        looking = gate(fence)
        cut = wait_for("the cutover at the fence", lambda: settled(looking.look()), 120, procs)
        assert cut.met, cut.message
        assert holds_fence(read_status(bootstrap, app.name, "blue"), fence, "seen")
        more, _ = produce_clicks(bootstrap, app.input.topic, 1000, users=300, start=3000)
        truth.update(more)
        wait_until_emitted(bootstrap, app, 4000, timeout_s=240)
        verdict = verify(truth, read_output(bootstrap, app.output.topic, app.output.partitions))
        assert verdict.ok, verdict.summary()
        marks, by_blue, by_green = markers_by_slot(bootstrap, app)
        assert by_blue[-1].emitted == fence and all(m.epoch == 1 for m in by_blue)
        assert by_green and all(m.epoch == 2 for m in by_green) and marks.index(by_green[0]) > marks.index(by_blue[-1])
    finally:
        for p in procs:
            stop_slot(p)
