"""The decision a restarted query takes when its checkpoint's positions are not in its input any more
(invariant 6), as a pure function; the source's use of it with a stand-in consumer; the sink's handling
of the batch that moves positions back; the harness's report of the reason."""

import json

import pytest

from baton.apps import ON_DATA_LOSS, AppDefinitionError, parse_definition
from baton.records import CommitMarker, Slot
from spark_apps.runtime.coordination.progress import failure_reason
from spark_apps.runtime.sink.kafka_sink import TransactionalEmitter, rewound
from spark_apps.runtime.source.input_check import (
    BEFORE_START,
    BEYOND_END,
    GONE,
    POLICIES,
    RECREATED,
    InputDataLoss,
    Loss,
    check_policy,
    decide,
    observe,
    read_identity,
    skipped,
    write_identity,
)
from spark_apps.runtime.source.kafka_stream_reader import KafkaStreamReader
from spark_apps.runtime.source.source_options import parse_options

# -- the decision


def test_positions_inside_the_log_are_fine_including_the_end_itself():
    d = decide("in", {0: 0, 1: 50, 2: 100}, lows={0: 0, 1: 0, 2: 10}, ends={0: 0, 1: 80, 2: 100}, policy="fail")
    assert d.ok and d.reason == "" and d.resume == {}


def test_beyond_the_end_fails_naming_topic_partitions_positions_and_the_way_out():
    d = decide("clicks", {0: 1500, 1: 40, 2: 1490}, lows={0: 0, 1: 0, 2: 0}, ends={0: 50, 1: 60, 2: 0}, policy="fail")
    assert not d.ok and d.resume == {}
    assert [(x.partition, x.kind, x.position, x.low, x.end) for x in d.losses] == [
        (0, BEYOND_END, 1500, 0, 50),
        (2, BEYOND_END, 1490, 0, 0),
    ]
    r = d.reason
    assert "\n" not in r
    assert r.startswith("input data loss on topic 'clicks', partitions 0, 2: ")
    assert "partition 0: checkpoint at offset 1500, beyond the end 50 (the broker holds [0, 50))" in r
    assert "partition 2: checkpoint at offset 1490, beyond the end 0 (the broker holds [0, 0))" in r
    assert "partition 1" not in r
    assert "recreated" in r and "broker reset" in r
    assert "reprocess into a new generation (baton_reprocess" in r and "on_data_loss: earliest" in r


def test_before_the_start_is_retention():
    d = decide("in", {0: 5, 1: 70}, lows={0: 40, 1: 0}, ends={0: 90, 1: 90}, policy="fail")
    assert [(x.partition, x.kind) for x in d.losses] == [(0, BEFORE_START)]
    assert "partition 0: checkpoint at offset 5, before the earliest available offset 40" in d.reason
    assert "offsets [5, 40) are gone" in d.reason and "retention" in d.reason


def test_earliest_resumes_each_lost_partition_at_its_earliest_offset_only():
    d = decide("in", {0: 1500, 1: 5, 2: 30}, lows={0: 0, 1: 40, 2: 0}, ends={0: 50, 1: 90, 2: 90}, policy="earliest")
    assert d.resume == {0: 0, 1: 40}  # back after a reset, forward past retention; partition 2 reads on
    assert "partition 0 from 1500 to 0, partition 1 from 5 to 40" in skipped("in", d)


def test_a_recreated_topic_is_a_loss_even_when_it_grew_past_the_positions():
    d = decide(
        "in", {0: 30, 1: 30}, lows={0: 0, 1: 0}, ends={0: 900, 1: 900}, policy="earliest", recreated=("OLDid", "NEWid")
    )
    assert [x.kind for x in d.losses] == [RECREATED, RECREATED] and d.resume == {0: 0, 1: 0}
    assert (
        "topic id OLDid, now NEWid" in d.reason and "partition 0: checkpoint at offset 30 of the old topic" in d.reason
    )


def test_a_partition_that_is_gone_keeps_its_position_under_earliest():
    d = decide("in", {0: 10, 3: 7}, lows={0: 0, 1: 0}, ends={0: 20, 1: 20}, policy="earliest")
    assert [(x.partition, x.kind) for x in d.losses] == [(3, GONE)] and d.resume == {}
    assert "the topic has no such partition now" in d.reason and "(it has partitions [0, 1])" in d.reason


def test_a_replayed_batch_is_checked_to_its_end():
    # The start is in the log, the batch's end is not: the batch cannot be read again as it was.
    d = decide("in", {0: 10}, lows={0: 0}, ends={0: 15}, policy="fail", end={0: 30})
    assert [(x.kind, x.position) for x in d.losses] == [(BEYOND_END, 30)]
    assert decide("in", {0: 10}, lows={0: 0}, ends={0: 30}, policy="fail", end={0: 30}).ok


def test_policies_are_the_app_definitions_and_others_are_refused():
    assert POLICIES == ON_DATA_LOSS == ("fail", "earliest")
    assert check_policy(" Earliest ") == "earliest"
    with pytest.raises(ValueError, match="onDataLoss must be one of fail, earliest; got 'skip'"):
        check_policy("skip")
    with pytest.raises(ValueError, match="'onDataLoss'"):
        parse_options({"kafka.bootstrap.servers": "h:1", "topic": "t", "onDataLoss": "latest"})
    assert parse_options({"kafka.bootstrap.servers": "h:1", "topic": "t"}).on_data_loss == "fail"


# -- the app definition


def definition(**extra):
    return {
        "name": "a",
        "module": "m",
        "version": "v1",
        "input": {"topic": "i", "partitions": 1},
        "output": {"topic": "o", "partitions": 1},
        **extra,
    }


def test_on_data_loss_in_the_app_definition_defaults_to_fail_and_is_validated():
    assert parse_definition(definition(), "a.yaml").on_data_loss == "fail"
    assert parse_definition(definition(on_data_loss="earliest"), "a.yaml").on_data_loss == "earliest"
    with pytest.raises(AppDefinitionError, match="field 'on_data_loss': must be one of fail, earliest, got 'latest'"):
        parse_definition(definition(on_data_loss="latest"), "a.yaml")
    with pytest.raises(AppDefinitionError, match="field 'on_data_loss': must be str"):
        parse_definition(definition(on_data_loss=False), "a.yaml")


# -- what the broker holds (observe), with a stand-in consumer


class Msg:
    def __init__(self, partition, offset, error=None):
        self._p, self._o, self._e = partition, offset, error

    def partition(self):
        return self._p

    def offset(self):
        return self._o

    def error(self):
        return self._e


class Eof:
    def code(self):
        from confluent_kafka import KafkaError

        return KafkaError._PARTITION_EOF


class Log:
    """A partition log as Tansu 0.6.0 answers: ListOffsets says the last batch's base + 1; a fetch delivers
    from the batch that holds the position to the true end, then EOF; a fetch beyond the end, nothing."""

    def __init__(self, batches: dict[int, list[int]], low: int = 0):
        self.batches, self.low = batches, low  # partition -> batch sizes
        self.assigned: dict[int, int] = {}
        self.fetches = 0

    def end(self, p):
        return sum(self.batches[p])

    def get_watermark_offsets(self, tp, timeout=None, cached=False):
        sizes = self.batches[tp.partition]
        return self.low, (sum(sizes[:-1]) + 1 if sizes else 0)

    def assign(self, tps):
        self.assigned = {tp.partition: tp.offset for tp in tps}

    def unassign(self):
        self.assigned = {}

    def consume(self, n, timeout):
        self.fetches += 1
        out = []
        for p, at in list(self.assigned.items()):
            if at > self.end(p):
                continue  # Tansu: no records, no error
            out += [Msg(p, o) for o in range(at, self.end(p))] + [Msg(p, self.end(p), Eof())]
            self.assigned[p] = self.end(p) + 10**9  # delivered: nothing more
        return out

    def position(self, tps):
        return tps


def test_observe_reads_the_true_end_only_where_the_reported_end_is_below_the_position():
    log = Log({0: [10, 10, 10], 1: [5], 2: [10, 10]})  # true ends 30, 5, 20; reported 21, 1, 11
    lows, ends = observe(log, "t", [0, 1, 2], {0: 29, 1: 5, 2: 25}, timeout_s=2)
    assert lows == {0: 0, 1: 0, 2: 0}
    assert ends[0] >= 29 and ends[1] >= 5  # in the log: Tansu's low end is no loss
    assert ends[2] == 20  # beyond the true end: exact
    assert decide("t", {0: 29, 1: 5, 2: 25}, lows, ends, "fail").losses == (Loss(2, BEYOND_END, 25, 0, 20),)


def test_observe_needs_no_fetch_when_every_position_is_within_the_reported_end():
    log = Log({0: [10, 10]})
    assert observe(log, "t", [0], {0: 11}, timeout_s=2) == ({0: 0}, {0: 11}) and log.fetches == 0


def test_observe_takes_a_silent_partition_as_in_the_log_after_its_timeout():
    class Silent(Log):
        def consume(self, n, timeout):
            return []

    lows, ends = observe(Silent({0: [3]}), "t", [0], {0: 50}, timeout_s=0.2)
    assert ends[0] == 50  # cannot tell: reading will


# -- the source at a restart (resume_point), with the stand-in broker


def reader(log: Log, tmp_path, policy="fail", dead_letters=False):
    options = {"kafka.bootstrap.servers": "h:1", "topic": "t", "onDataLoss": policy}
    if dead_letters:
        options.update(valueFields=json.dumps([["user_id", "string"]]), deadLetterDir=str(tmp_path / "dl"))
    r = KafkaStreamReader(parse_options(options))
    r._probe = log
    r._partition_ids = lambda: sorted(log.batches)
    return r


def test_a_restart_beyond_the_end_fails_under_fail(tmp_path):
    r = reader(Log({0: [10, 10], 1: []}), tmp_path)
    with pytest.raises(InputDataLoss, match=r"partition 1: checkpoint at offset 7, beyond the end 0"):
        r.resume_point({0: 20, 1: 7})


def test_a_restart_under_earliest_plans_a_batch_that_only_moves_positions(tmp_path):
    log = Log({0: [10, 10], 1: [4]}, low=0)
    r = reader(log, tmp_path, "earliest", dead_letters=True)
    assert r.resume_point({0: 20, 1: 7}) == {0: 20, 1: 0}
    assert r.verified
    assert r.partitions({"0": 20, "1": 7}, {"0": 20, "1": 0}) == []  # nothing to read in it
    # past retention (forward): the dead-letter spool gets the (empty) range, as a read would leave it
    r2 = reader(Log({0: [10, 10], 1: [10, 10]}, low=12), tmp_path, "earliest", dead_letters=True)
    assert r2.resume_point({0: 15, 1: 3}) == {0: 15, 1: 12}
    assert sorted(f.name for f in (tmp_path / "dl").iterdir()) == ["1-3-12.arrow"]


def test_after_moving_back_a_cap_from_before_holds_the_reader_until_it_is_written_again(tmp_path):
    """A standby's cap is what the active emitted, in the old topic's offsets: after its resume it means
    nothing, and the standby must not run ahead of the active's own resume (invariant 2)."""
    cap = tmp_path / "cap.json"
    cap.write_text(json.dumps({"0": 20, "1": 7}))
    r = reader(Log({0: [10, 10], 1: [4]}), tmp_path, "earliest")
    r.opts.cap_file = str(cap)
    assert r.resume_point({0: 20, 1: 7}) == {0: 20, 1: 0}
    assert r.cap_is_stale() and r.cap_is_stale()
    assert r.latestOffset({"0": 20, "1": 0}, None) == {"0": 20, "1": 0}  # held: no batch
    cap.write_text(json.dumps({"0": 20, "1": 3}))  # the active's resume and next batch emitted
    assert not r.cap_is_stale() and not r.cap_is_stale()
    # Forward only (past retention): the offsets keep their meaning, nothing is held.
    r2 = reader(Log({0: [10, 10]}, low=12), tmp_path, "earliest")
    r2.opts.cap_file = str(cap)
    assert r2.resume_point({0: 5}) == {0: 12} and not r2.cap_is_stale()


def test_a_replayed_batch_reads_what_is_left_under_earliest(tmp_path):
    log = Log({0: [10, 10], 1: [10]}, low=5)
    r = reader(log, tmp_path, "earliest")
    # partition 0: [2, 12) past retention -> [5, 12); partition 1: [8, 30) beyond its end 10 -> nothing
    assert r.replay_ranges({0: 2, 1: 8}, {0: 12, 1: 30}) == {0: (5, 12)}
    with pytest.raises(InputDataLoss):
        reader(log, tmp_path).replay_ranges({0: 2, 1: 8}, {0: 12, 1: 30})


def test_the_topic_id_is_kept_beside_the_positions_and_a_new_one_is_a_loss(tmp_path):
    ident = tmp_path / "checkpoint" / "baton-input.json"
    write_identity(str(ident), "t", "OLD")
    assert read_identity(str(ident)) == "OLD" and read_identity(str(tmp_path / "none.json")) is None
    log = Log({0: [10, 10]})
    r = reader(log, tmp_path)
    r.opts.identity_file = str(ident)
    r._topic_id = lambda: "NEW"
    with pytest.raises(InputDataLoss, match="topic id OLD, now NEW"):
        r.resume_point({0: 20})
    assert read_identity(str(ident)) == "OLD"  # a failed start changes nothing
    r.opts.on_data_loss = "earliest"
    assert r.resume_point({0: 20}) == {0: 0}
    assert read_identity(str(ident)) == "OLD"  # not before the batch that moves the positions is committed
    r.committed({"0": 0})
    assert read_identity(str(ident)) == "NEW"


def test_a_read_the_broker_answers_out_of_range_checks_again_where_the_query_stands(tmp_path):
    from spark_apps.runtime.source.kafka_driver_reader import DriverStreamReader

    class Prefetch:
        closed = False

        def out_of_range(self):
            return {0: 25}

        def close(self):
            self.closed = True

    d = DriverStreamReader(parse_options({"kafka.bootstrap.servers": "h:1", "topic": "t", "readOn": "driver"}))
    d.planner._probe, d.planner._partition_ids, d.planner.verified = Log({0: [10, 10]}), lambda: [0], True
    d._prefetch = pf = Prefetch()
    with pytest.raises(InputDataLoss, match="partition 0: checkpoint at offset 25, beyond the end 20"):
        d.read({"0": 25})
    assert pf.closed and d._prefetch is None


# -- the sink: the batch that moves positions back is emitted once


def emitter_with(last_emitted):
    e = TransactionalEmitter("h:1", "a", Slot.BLUE, 0, "out", "dl", "commits")
    e.last = (
        None
        if last_emitted is None
        else CommitMarker(app="a", generation=0, epoch=1, slot=Slot.BLUE, batch_id=9, emitted=last_emitted, ts_ms=0)
    )
    return e


def test_a_batch_that_moves_positions_back_is_emitted_once():
    start, end = {0: 1500, 1: 1500}, {0: 0, 1: 1500}
    assert rewound(start, end) and not rewound({0: 1}, {0: 2})
    assert not emitter_with({0: 1500, 1: 1500}).already_emitted(end, start)  # the marker from before it
    assert emitter_with({0: 0, 1: 1500}).already_emitted(end, start)  # emitted, then a crash: replay
    assert emitter_with({0: 1500, 1: 1500}).already_emitted({0: 1500, 1: 1400}, {0: 1500, 1: 1400})


# -- the harness reports the source's reason, not Spark's wrapping


def test_the_failure_reason_is_the_sources_line():
    text = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: [PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR]"
        " Failed when Python streaming data source perform latestOffset: Traceback (most recent call last):\n"
        '  File "x.py", line 1, in read\n'
        "spark_apps.runtime.source.input_check.InputDataLoss: input data loss on topic 'in', partition 0: ..."
        " Way out.\n"
        "\tat org.apache.spark.Foo(Foo.scala:1)\n"
    )
    assert failure_reason(text) == "input data loss on topic 'in', partition 0: ... Way out."
    assert failure_reason("boom\nat x") == "boom\nat x"
    # Another Python error (a topic the broker lost altogether): its own line first, not cut off at the end.
    other = text.replace(
        "spark_apps.runtime.source.input_check.InputDataLoss: input data loss on topic 'in', partition 0: ... Way out.",
        "ValueError: option 'topic': topic 'in' does not exist",
    )
    assert failure_reason(other) == (
        "ValueError: option 'topic': topic 'in' does not exist ([STREAM_FAILED] Query [id = 1] terminated with "
        "exception: [PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR] Failed when Python streaming data source perform "
        "latestOffset:)"
    )


def test_a_loss_of_many_partitions_keeps_its_cause_and_way_out_within_a_status():
    d = decide(
        "in",
        {p: 10_000 + p for p in range(512)},
        lows={p: 0 for p in range(512)},
        ends={p: 5 for p in range(512)},
        policy="fail",
    )
    assert len(d.reason) < 2000 and d.reason.endswith("(its state kept, what was lost skipped).")
    assert "partition 3: checkpoint at offset 10003, beyond the end 5" in d.reason
    assert "and 508 more, at {4: 10004, 5: 10005, " in d.reason and "19: 10019, ...} (partition: checkpoint" in d.reason


def test_a_broker_that_does_not_answer_makes_an_empty_batch_and_an_answer_still_fails():
    from confluent_kafka import KafkaError, KafkaException

    from spark_apps.runtime.source.kafka_driver_reader import DriverStreamReader

    d = DriverStreamReader(parse_options({"kafka.bootstrap.servers": "h:1", "topic": "t", "readOn": "driver"}))
    d.planner.verified = True
    d.planner.cap_is_stale = lambda: False

    def silent():
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get metadata: Local: Timed out"))

    d.planner._partition_ids = silent
    start = {"0": 5, "1": 7}
    for _ in range(2):  # the query goes on, its next trigger asks again
        rows, end = d.read(start)
        assert list(rows) == [] and end == start
    assert d._silent_since is not None

    def missing():
        raise ValueError("option 'topic': topic 't' does not exist")

    d.planner._partition_ids = missing
    with pytest.raises(ValueError, match="does not exist"):
        d.read(start)
