"""Offset arithmetic, capping, admission control and option parsing of the baton-kafka source
(pure Python, no broker, no Spark session)."""

import json
import pickle
import random

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from spark_apps.runtime.source.kafka_source import KafkaSource
from spark_apps.runtime.source.kafka_stream_reader import KafkaStreamReader
from spark_apps.runtime.source.source_columns import SCHEMA
from spark_apps.runtime.source.source_options import EARLIEST, LATEST, parse_options
from spark_apps.runtime.source.source_plan import (
    BatchPacer,
    offsets_from_json,
    offsets_to_json,
    parse_cap,
    plan_end,
    plan_partitions,
    read_cap,
    resolve_starting,
    split_limit,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"}


def opts(**extra):
    return parse_options({**BASE, **extra})


# -- options


def test_defaults_and_case_insensitive_keys():
    o = parse_options(
        {
            "Kafka.Bootstrap.Servers": "h:1",
            "TOPIC": "clicks",
            "maxRecordsPerTrigger": "50",
            "capFile": "/x/cap.json",
            "kafka.fetch.max.bytes": "1000",
        }
    )
    assert (o.bootstrap, o.topic, o.starting, o.max_records, o.cap_file) == (
        "h:1",
        "clicks",
        "latest",
        50,
        "/x/cap.json",
    )
    assert o.kafka_conf == {"fetch.max.bytes": "1000"}
    assert o.poll_timeout_s == 120.0
    assert o.align_partitions and not opts(alignPartitions="False").align_partitions


def test_bootstrap_alias_is_accepted():
    assert parse_options({"bootstrap.servers": "h:2", "topic": "t"}).bootstrap == "h:2"


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("earliest", "earliest"),
        ("LATEST", "latest"),
        ('{"0": 42, "1": 7}', {0: 42, 1: 7}),
        ('{"t": {"0": 5}}', {0: 5}),  # Spark's per-topic form
        ('{"0": -2, "1": -1}', {0: EARLIEST, 1: LATEST}),
    ],
)
def test_starting_offsets_forms(raw, expected):
    assert opts(startingoffsets=raw).starting == expected


def test_starting_timestamp():
    o = opts(startingtimestamp="1700000000000")
    assert o.starting_timestamp == 1_700_000_000_000 and o.starting is None


@pytest.mark.parametrize(
    "bad, option",
    [
        ({"kafka.bootstrap.servers": None}, "kafka.bootstrap.servers"),
        ({"topic": ""}, "topic"),
        ({"topic": "a,b"}, "topic"),
        ({"startingoffsets": "newest"}, "startingOffsets"),
        ({"startingoffsets": '{"0": 1'}, "startingOffsets"),
        ({"startingoffsets": '{"x": 1}'}, "startingOffsets"),
        ({"startingoffsets": '{"0": "1"}'}, "startingOffsets"),
        ({"startingoffsets": '{"0": -5}'}, "startingOffsets"),
        ({"startingoffsets": "{}"}, "startingOffsets"),
        ({"startingtimestamp": "yesterday"}, "startingTimestamp"),
        ({"startingtimestamp": "1", "startingoffsets": "earliest"}, "startingOffsets"),
        ({"maxrecordspertrigger": "0"}, "maxRecordsPerTrigger"),
        ({"maxrecordspertrigger": "ten"}, "maxRecordsPerTrigger"),
        ({"polltimeoutms": "-1"}, "pollTimeoutMs"),
        ({"minbatchintervalms": "0"}, "minBatchIntervalMs"),
        ({"minbatchintervalms": "1s"}, "minBatchIntervalMs"),
        ({"kafka.group.id": "mine"}, "kafka.group.id"),
        ({"alignpartitions": "no"}, "alignPartitions"),
        ({"packrows": "yes"}, "packRows"),
        ({"packrows": "true"}, "packRows"),  # without valueFields: nothing decoded to pack
    ],
)
def test_bad_options_name_the_option(bad, option):
    options = {**BASE, **bad}
    options = {k: v for k, v in options.items() if v is not None}
    with pytest.raises(ValueError, match=option.replace(".", r"\.")):
        parse_options(options)


def test_packed_rows_change_the_schema_spark_is_told():
    from spark_apps.runtime.source.packed_rows import packed_schema

    decoded = {
        "valueFields": '[["user_id", "string"], ["n", "int"]]',
        "requiredFields": '["user_id"]',
        "deadLetterDir": "/tmp/dead",
    }
    assert not opts(**decoded).packed
    packed = KafkaSource({**BASE, **decoded, "packRows": "true"})
    assert packed.schema() == packed_schema([("user_id", "string"), ("n", "int")], ["user_id"])
    assert [f.name for f in packed.schema().fields] == ["_p0_bytes", "_p0_ends", "_p1_values", "_p1_valid"]


def test_source_rejects_a_foreign_schema():
    from pyspark.sql.types import StringType, StructField, StructType

    src = KafkaSource(BASE)
    assert src.schema() == SCHEMA and KafkaSource.name() == "baton-kafka"
    assert isinstance(src.streamReader(SCHEMA), KafkaStreamReader)
    with pytest.raises(ValueError, match="the schema its options give"):
        src.streamReader(StructType([StructField("value", StringType())]))


# -- starting offsets against the topic


def test_resolve_starting_checks_partitions_and_range():
    lows, ends = {0: 0, 1: 10, 2: 0}, {0: 100, 1: 20, 2: 0}
    assert resolve_starting({0: 42, 1: EARLIEST, 2: LATEST}, [0, 1, 2], lows, ends) == {0: 42, 1: 10, 2: 0}
    with pytest.raises(ValueError, match=r"startingOffsets.*partitions \[7\]"):
        resolve_starting({0: 1, 1: 10, 2: 0, 7: 1}, [0, 1, 2], lows, ends)
    with pytest.raises(ValueError, match=r"startingOffsets.*every partition.*\[2\]"):
        resolve_starting({0: 1, 1: 10}, [0, 1, 2], lows, ends)
    with pytest.raises(ValueError, match=r"startingOffsets.*offset 5 for partition 1"):
        resolve_starting({0: 1, 1: 5, 2: 0}, [0, 1, 2], lows, ends)
    with pytest.raises(ValueError, match=r"startingOffsets.*offset 101 for partition 0"):
        resolve_starting({0: 101, 1: 10, 2: 0}, [0, 1, 2], lows, ends)


# -- offsets JSON


def test_offsets_json_is_in_numeric_partition_order():
    d = offsets_to_json({10: 1, 2: 3, 0: 5})
    assert list(d) == ["0", "2", "10"]
    assert json.dumps(d) == json.dumps(offsets_to_json({0: 5, 10: 1, 2: 3}))
    assert offsets_from_json(d) == {0: 5, 2: 3, 10: 1}


# -- capping


def test_cap_bounds_the_end_and_never_rewinds():
    start = {0: 10, 1: 50, 2: 0}
    avail = {0: 100, 1: 100, 2: 100}
    assert plan_end(start, avail) == {0: 100, 1: 100, 2: 100}
    assert plan_end(start, avail, cap={0: 40, 1: 20, 2: 500}) == {0: 40, 1: 50, 2: 100}


def test_available_now_target_bounds_the_end():
    assert plan_end({0: 0, 1: 0}, {0: 100, 1: 100}, target={0: 60, 1: 100}) == {0: 60, 1: 100}


def test_new_partition_in_available_and_vanished_partition_in_start():
    assert plan_end({0: 5, 1: 0, 3: 9}, {0: 8, 1: 4}) == {0: 8, 1: 4, 3: 9}


def test_cap_file_must_name_every_partition(tmp_path):
    assert parse_cap('{"0": 1, "1": 2}', [0, 1]) == {0: 1, 1: 2}
    with pytest.raises(ValueError, match=r"capFile.*missing \[1\]"):
        parse_cap('{"0": 1}', [0, 1])
    with pytest.raises(ValueError, match=r"capFile.*unknown \[5\]"):
        parse_cap('{"0": 1, "1": 2, "5": 3}', [0, 1])
    with pytest.raises(ValueError, match="capFile"):
        parse_cap('{"0": -1, "1": 2}', [0, 1])
    path = tmp_path / "cap.json"
    assert read_cap(str(path), [0, 1]) is None  # no file, no cap
    path.write_text('{"0": 3, "1": 4}')
    assert read_cap(str(path), [0, 1]) == {0: 3, 1: 4}
    path.write_text('{"0": 3')
    with pytest.raises(ValueError, match="capFile"):
        read_cap(str(path), [0, 1], attempts=2)


# -- admission control


def test_split_limit_is_proportional_and_exact():
    assert split_limit({0: 100, 1: 300}, 40) == {0: 10, 1: 30}
    assert split_limit({0: 5, 1: 5}, 100) == {0: 5, 1: 5}
    # remainder goes to the largest fractional share, ties to the lower partition
    assert split_limit({0: 1, 1: 1, 2: 1}, 2) == {0: 1, 1: 1, 2: 0}


def test_split_limit_properties_random():
    rng = random.Random(7)
    for _ in range(2000):
        backlog = {p: rng.choice([0, 1, 2, 3, 10, 999, rng.randrange(1, 10**6)]) for p in range(rng.randrange(1, 12))}
        limit = rng.choice([1, 2, 3, 7, 100, rng.randrange(1, 10**6)])
        share = split_limit(backlog, limit)
        total = sum(backlog.values())
        assert sum(share.values()) == min(limit, total)
        assert all(0 <= share[p] <= backlog[p] for p in backlog)


def test_admission_control_never_stalls_with_fewer_records_than_partitions():
    start = {p: 0 for p in range(8)}
    avail = {p: 3 for p in range(8)}
    pos, batches = dict(start), 0
    while pos != avail:
        end = plan_end(pos, avail, max_records=1)
        assert sum(end[p] - pos[p] for p in end) == 1
        pos, batches = end, batches + 1
    assert batches == 24


def test_admission_control_with_cap():
    end = plan_end({0: 0, 1: 0}, {0: 1000, 1: 1000}, cap={0: 10, 1: 1000}, max_records=100)
    assert end[0] <= 10 and sum(end.values()) == 100


# -- planning


def test_partitions_skip_empty_ranges():
    parts = plan_partitions("t", {0: 5, 1: 7, 2: 0}, {0: 9, 1: 7, 2: 3})
    assert [(x.topic, x.partition, x.start, x.end) for x in parts] == [("t", 0, 5, 9), ("t", 2, 0, 3)]
    assert pickle.loads(pickle.dumps(parts[0])).end == 9


class FakeConsumer:
    """Stands in for the driver-side consumer: only what latestOffset touches (ListOffsets for the
    check of the query's positions at its first plan, input_check.observe)."""

    def __init__(self, lows=None, available=None):
        self.closed = False
        self.lows, self.available = lows or {}, available or {}

    def __reduce__(self):
        raise TypeError("a Kafka client must never be pickled")

    def get_watermark_offsets(self, tp, timeout=None, cached=False):
        return self.lows.get(tp.partition, 0), self.available[tp.partition]

    def close(self):
        self.closed = True


def reader_with(available, lows=None, **options):
    r = KafkaStreamReader(opts(**options))
    parts = sorted(available)
    r._probe = FakeConsumer(lows, available)
    r._partition_ids = lambda: parts
    r._lows = dict(lows or {p: 0 for p in parts})
    r.available_ends = lambda ps: {p: available[p] for p in ps}
    return r


def test_reader_latest_offset_with_limits_cap_and_report(tmp_path):
    cap = tmp_path / "cap.json"
    r = reader_with({0: 100, 1: 100, 2: 100}, maxrecordspertrigger="30", capfile=str(cap))
    assert r.getDefaultReadLimit() == ReadMaxRows(30)
    start = {"0": 0, "1": 0, "2": 0}
    assert r.latestOffset(start, ReadMaxRows(30)) == {"0": 10, "1": 10, "2": 10}
    assert r.latestOffset(start, ReadAllAvailable()) == {"0": 100, "1": 100, "2": 100}
    assert r.reportLatestOffset() == {"0": 100, "1": 100, "2": 100}
    cap.write_text(json.dumps({"0": 5, "1": 100, "2": 0}))
    assert r.latestOffset(start, ReadAllAvailable()) == {"0": 5, "1": 100, "2": 0}
    assert r.reportLatestOffset() == {"0": 100, "1": 100, "2": 100}  # uncapped: shows the lag
    # nothing new: the very same start comes back (Spark sees "no data")
    held = {"0": 5, "1": 100, "2": 0}
    assert r.latestOffset(held, ReadAllAvailable()) is held
    cap.write_text(json.dumps({"0": 5}))
    with pytest.raises(ValueError, match="capFile"):
        r.latestOffset(held, ReadAllAvailable())


def test_reader_available_now_target_and_new_partition():
    avail = {0: 50, 1: 50}
    r = reader_with(avail, lows={0: 0, 1: 0, 2: 4})
    assert r.getDefaultReadLimit() == ReadAllAvailable()
    r.prepareForTriggerAvailableNow()
    avail.update({0: 80, 1: 90, 2: 10})  # more data and a new partition after the target was taken
    r._partition_ids = lambda: [0, 1, 2]
    assert r.latestOffset({"0": 10, "1": 50}, ReadAllAvailable()) == {"0": 50, "1": 50, "2": 10}
    parts = r.partitions({"0": 10, "1": 50}, {"0": 50, "1": 50, "2": 10})
    assert [(x.partition, x.start, x.end) for x in parts] == [(0, 10, 50), (2, 4, 10)]


def test_pacer_holds_new_input_for_the_interval_but_not_a_moved_cap(tmp_path):
    cap = tmp_path / "cap.json"
    pacer = BatchPacer(1.0, str(cap))
    assert not pacer.hold(now=10.0)  # the first look
    assert pacer.hold(now=10.1) and pacer.hold(now=10.94)  # new input alone waits for the interval
    assert not pacer.hold(now=10.96)  # passed, to within half a tick: look again
    cap.write_text(json.dumps({"0": 5}))  # the follower moved the cap
    assert not pacer.hold(now=11.05)  # looked at once, on the next tick
    assert pacer.hold(now=11.1)
    cap.write_text(json.dumps({"0": 9}))
    assert not pacer.hold(now=11.2)
    cap.unlink()  # the cap removed (lifted) is a change too
    assert not pacer.hold(now=11.3)
    assert pacer.hold(now=11.4)
    assert not BatchPacer(0.0, str(cap)).hold(now=0.0) and not BatchPacer(0.0, None).hold(now=0.0)


def test_pacer_looks_on_the_tick_nearest_the_interval_whatever_each_ticks_delay():
    """Ticks every 100 ms, each look 0-6 ms after its tick: a look that comes sooner after its tick than
    the previous one did still starts the batch on the 10th tick, not the 11th."""
    pacer = BatchPacer(1.0, None)
    looks = []
    for tick in range(1, 60):
        delay = 0.001 * (tick * 3 % 7)
        if not pacer.hold(now=tick * 0.1 + delay):
            looks.append(tick)
    assert looks == [1, 11, 21, 31, 41, 51]


def test_pacer_names_the_earliest_start_of_the_next_batch():
    pacer = BatchPacer(1.0, None)
    assert pacer.next_look() is None  # no look yet
    pacer.hold(now=10.0)
    assert pacer.next_look() == pytest.approx(10.95)  # where hold() next lets a look through
    assert pacer.hold(now=10.94) and not pacer.hold(now=pacer.next_look() + 0.001)
    assert BatchPacer(0.0, None).next_look() is None  # no interval: every tick looks


def test_reader_latest_offset_is_paced_by_min_batch_interval(tmp_path):
    cap = tmp_path / "cap.json"
    cap.write_text(json.dumps({"0": 40, "1": 40}))
    avail = {0: 100, 1: 100}
    r = reader_with(avail, capfile=str(cap), minbatchintervalms="60000")
    assert r.opts.min_batch_interval_s == 60.0
    start = {"0": 0, "1": 0}
    assert r.latestOffset(start, ReadAllAvailable()) == {"0": 40, "1": 40}
    at = {"0": 40, "1": 40}
    avail.update({0: 200, 1: 200})
    assert r.latestOffset(at, ReadAllAvailable()) is at  # held: no look within the interval
    cap.write_text(json.dumps({"0": 150, "1": 150}))
    assert r.latestOffset(at, ReadAllAvailable()) == {"0": 150, "1": 150}  # the cap moved: at once
    r._target = {0: 200, 1: 200}  # Trigger.AvailableNow is never held
    cap.unlink()
    assert r.latestOffset(at, ReadAllAvailable()) == {"0": 200, "1": 200}
    assert r.latestOffset({"0": 150, "1": 150}, ReadAllAvailable()) == {"0": 200, "1": 200}


def test_reader_pickles_without_clients_and_stop_closes():
    r = KafkaStreamReader(opts(maxrecordspertrigger="9", minbatchintervalms="250"))
    r._probe = FakeConsumer()  # as after initialOffset/latestOffset on the driver
    r2 = pickle.loads(pickle.dumps(r))
    assert r2._probe is None and r2.opts.topic == "t" and r2.opts.max_records == 9
    assert r2._pacer.interval_s == 0.25
    probe = r._probe
    r.stop()
    assert probe.closed and r._probe is None
    r.commit({"0": 1})  # no-op, nothing to close or commit


def test_driver_reader_holds_a_trigger_without_touching_the_broker(tmp_path):
    from spark_apps.runtime.source.kafka_driver_reader import DriverStreamReader

    cap = tmp_path / "cap.json"
    r = DriverStreamReader(opts(readon="driver", capfile=str(cap), minbatchintervalms="60000"))

    def no_broker():
        raise AssertionError("a held trigger asked the broker")

    r.planner._partition_ids = no_broker
    assert not r._pacer.hold()  # the last look (a read that took a batch)
    start = {"0": 7}
    rows, end = r.read(start)
    assert end is start and list(rows) == []
    cap.write_text(json.dumps({"0": 9}))
    with pytest.raises(AssertionError, match="asked the broker"):  # a moved cap looks at once
        r.read(start)
