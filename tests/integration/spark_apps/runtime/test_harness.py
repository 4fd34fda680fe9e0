"""The click-count app in its harness, on the real broker and real Spark: exactly once through a
kill -9 of the driver, bad input to the dead-letter topic without a restart, graceful SIGTERM; and
the harness's path for events the source does not decode (nested fields: Spark's from_json)."""

import time

import pytest

from baton.kafka.admin import delete_topics
from baton.kafka.control_log import write_control
from baton.kafka.markers import read_last_marker
from baton.records import ControlRecord, Slot, SlotSpec, SlotState
from baton.tools.verify import read_output, verify
from tests.support.slots import (
    kill_group,
    make_app,
    produce_clicks,
    read_status,
    read_topic,
    start_slot,
    stop_slot,
    wait_until_emitted,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def app(bootstrap, tmp_path, request):
    app, path = make_app(bootstrap, tmp_path, **getattr(request, "param", {}))
    write_control(
        bootstrap,
        ControlRecord(
            app=app.name, revision=1, epoch=1, active=Slot.BLUE, slots={Slot.BLUE: SlotSpec(SlotState.RUNNING, "v1")}
        ),
    )
    yield app, path
    delete_topics(bootstrap, [t.name for t in app.topics()])


def test_kill_9_mid_stream_then_restart_is_exactly_once(bootstrap, app, tmp_path):
    app, path = app
    sent_from = time.time() * 1000
    truth, bad = produce_clicks(bootstrap, app.input.topic, 30_000, users=500, bad_every=100)
    sent_until = time.time() * 1000
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
        assert stop_slot(proc) == 0  # graceful stop at a batch boundary
    statuses = read_status(bootstrap, app.name)
    assert statuses[-1].state is SlotState.STOPPED
    running = [s for s in statuses if s.batch_id >= 0]
    assert running and running[-1].dead_letters > 0 and running[-1].state_rows == len(truth)
    assert any(s.restore_ms is not None for s in running)
    # Each batch that read input carries its end-to-end latency: from its oldest and newest records'
    # timestamps (all sent between sent_from and sent_until) to the batch's end, shortly before the record.
    read = [s for s in running if s.input_rows > 0]
    assert read and all(s.latency_ms is not None and s.latency_newest_ms <= s.latency_ms for s in read), read
    assert all(s.ts_ms - s.latency_ms >= sent_from - 1000 for s in read)
    assert all(s.ts_ms - s.latency_newest_ms <= sent_until + 5000 for s in read)
    # input_rows counts events, though the source packs them many to a Spark row: over the batches
    # (one status each; idle heartbeats repeat it), the good events, or up to every record read where
    # a replayed batch is counted by its offsets.
    rows = {s.batch_id: s.input_rows for s in read}
    rows.update(batch_killed_before_its_status(running))
    assert 30_000 - bad <= sum(rows.values()) <= 30_000, rows


def batch_killed_before_its_status(running) -> dict[int, int]:
    """{batch: records} for the one batch the kill may leave without a status: committed (the restart
    does not replay it) before Spark reported its progress. It may only be the first run's last batch,
    and its records are what the batches either side of it say they processed, less the next batch's
    events; which counts its dead letters too, still within every record read."""
    by_batch = {s.batch_id: s for s in running}
    ids = sorted(by_batch)
    missing = sorted(set(range(ids[0], ids[-1] + 1)) - set(ids))
    if not missing:
        return {}
    assert len(missing) == 1, f"batches without a status: {missing}"
    before, after = by_batch.get(missing[0] - 1), by_batch.get(missing[0] + 1)
    assert before and after and before.pid != after.pid, f"batch {missing[0]} has no status, not at the kill"
    read_by_both = sum(after.processed.values()) - sum(before.processed.values())
    return {missing[0]: read_by_both - after.input_rows}


def read_dead(bootstrap, topic):
    return read_topic(bootstrap, topic, lambda m: {k: v.decode() for k, v in m.headers()})


NESTED = {"module": "tests.support.nested_clicks"}


@pytest.mark.parametrize("app", [NESTED], indirect=True)
def test_events_spark_parses_count_once_and_bad_ones_are_dead_letters(bootstrap, app, tmp_path):
    app, path = app
    truth, bad = produce_clicks(bootstrap, app.input.topic, 4_000, users=100, bad_every=25)
    proc = start_slot(bootstrap, path, tmp_path)
    try:
        wait_until_emitted(bootstrap, app, 4_000)
        verdict = verify(truth, read_output(bootstrap, app.output.topic, app.output.partitions))
        assert verdict.ok, verdict.summary()
        dead = read_dead(bootstrap, app.dead_letter_topic)
        assert len(dead) == bad and {h["baton.reason"] for h in dead} == {
            "not a JSON object",
            "missing or invalid field(s): user_id",
        }
    finally:
        assert stop_slot(proc) == 0


@pytest.mark.parametrize("app", [NESTED], indirect=True)
def test_each_event_is_parsed_once_per_branch(bootstrap, app, tmp_path, spark):
    """The optimizer must not copy from_json into the split filters (it did: 8 parses per event)."""
    from spark_apps.runtime.harness import Harness

    app, _ = app
    before = dict(spark.conf.getAll)
    harness = Harness(app, Slot.BLUE, bootstrap, tmp_path / "state")
    try:
        # The optimizer over the analysed plan: QueryExecution refuses to optimize an unstarted stream.
        analyzed = harness.build_frame()._jdf.queryExecution().analyzed()
        plan = spark._jsparkSession.sessionState().optimizer().execute(analyzed).toString()
    finally:
        harness.status_producer.flush(5)
        # The harness's session settings, off again; static ones (JVM options) cannot change on a live session.
        for key in set(spark.conf.getAll) - set(before):
            if spark.conf.isModifiable(key):
                spark.conf.unset(key)
        for key, value in before.items():
            if spark.conf.get(key, None) != value and spark.conf.isModifiable(key):
                spark.conf.set(key, value)
    assert plan.count("from_json(") == 2, plan
