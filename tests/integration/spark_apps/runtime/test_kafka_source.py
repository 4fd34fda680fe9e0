"""The baton-kafka source against the real (Tansu) broker and a real local Spark session.

Every stream runs with Trigger.AvailableNow into foreachBatch, which collects the rows on the
driver; assertions are on exact (partition, offset) sets, so a lost, duplicated or extra record
fails the test. The streaming reads run twice: read by tasks on the executors, and on the driver
(readOn=driver, spark_apps.runtime.source.kafka_driver_reader).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from spark_apps.runtime.source.kafka_source import KafkaSource
from spark_apps.runtime.source.source_columns import SCHEMA
from spark_apps.runtime.source.source_plan import KafkaInputPartition

pytestmark = pytest.mark.integration


@dataclass
class Source:
    spark: object
    read_on: str


@pytest.fixture(scope="module", params=["executors", "driver"])
def source(spark, request):
    spark.dataSource.register(KafkaSource)
    return Source(spark, request.param)


def produce(bootstrap, topic, records, linger_ms=50):
    """records: (partition, key, value[, timestamp ms]). Lingering makes multi-record batches."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "batch.num.messages": 10000})
    for r in records:
        part, key, value = r[:3]
        kw = {"timestamp": r[3]} if len(r) > 3 else {}
        p.produce(topic, key=key, value=value, partition=part, **kw)
    assert p.flush(30) == 0


def keyed(n, partitions=3):
    return [(i % partitions, f"k{i}".encode(), json.dumps({"i": i}).encode()) for i in range(n)]


def run(source, bootstrap, topic, checkpoint, **options):
    """One availableNow run; returns [(batch_id, [(partition, offset, key, value, ts), ...])] and the query."""
    reader = (
        source.spark.readStream.format("baton-kafka")
        .option("readOn", source.read_on)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    batches = []

    def collect(df, batch_id):
        rows = [
            (r.partition, r.offset, bytes(r.key) if r.key is not None else None, bytes(r.value), r.timestamp)
            for r in df.collect()
        ]
        batches.append((batch_id, rows))

    q = (
        reader.load()
        .writeStream.foreachBatch(collect)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        assert q.awaitTermination(90), "availableNow query did not finish"
    finally:
        q.stop()
    if q.exception() is not None:
        raise q.exception()
    return batches, q


def offsets_of(batches):
    return [(p, o) for _, rows in batches for (p, o, *_rest) in rows]


def progress_offsets(q, key):
    """An offset from the last progress report (Python sources report it as JSON text)."""
    v = q.lastProgress["sources"][0][key]
    return json.loads(v) if isinstance(v, str) else v


# -- end offsets on Tansu (no Spark)


def test_end_offsets_are_exact_with_multi_record_batches(bootstrap, topics):
    """Tansu's ListOffsets reports last batch base + 1; the source's ends must be the real ends."""
    t = topics(m=2)["m"]
    produce(bootstrap, t, [(i % 2, None, b"x") for i in range(1000)], linger_ms=100)
    reader = KafkaSource({"kafka.bootstrap.servers": bootstrap, "topic": t}).streamReader(SCHEMA)
    try:
        assert reader.available_ends([0, 1]) == {0: 500, 1: 500}
        _, listed = reader._watermarks([0, 1])
        assert all(listed[p] <= 500 for p in (0, 1))  # a lower bound (on Tansu: far lower)
        assert reader.initialOffset() == {"0": 500, "1": 500}  # "latest" is the real end
    finally:
        reader.stop()


def test_missing_topic_and_unknown_partition_are_clear_errors(bootstrap, topics):
    t = topics(e=2)["e"]
    reader = KafkaSource({"kafka.bootstrap.servers": bootstrap, "topic": f"nope-{uuid.uuid4().hex[:6]}"}).streamReader(
        SCHEMA
    )
    with pytest.raises(ValueError, match="option 'topic'.*does not exist"):
        reader.initialOffset()
    reader.stop()
    reader = KafkaSource(
        {"kafka.bootstrap.servers": bootstrap, "topic": t, "startingOffsets": '{"0": 0, "1": 0, "5": 0}'}
    ).streamReader(SCHEMA)
    with pytest.raises(ValueError, match=r"startingOffsets.*partitions \[5\]"):
        reader.initialOffset()
    reader.stop()


# -- streaming reads


def test_every_offset_read_exactly_once(source, bootstrap, topics, tmp_path):
    t = topics(a=3)["a"]
    n = 3000
    produce(bootstrap, t, keyed(n))
    batches, q = run(source, bootstrap, t, tmp_path / "ck", startingOffsets="earliest")
    got = offsets_of(batches)
    assert len(got) == n and len(set(got)) == n
    assert set(got) == {(p, o) for p in range(3) for o in range(n // 3)}
    rows = [r for _, rs in batches for r in rs]
    assert {r[2] for r in rows} == {f"k{i}".encode() for i in range(n)}
    assert all(json.loads(r[3])["i"] % 3 == r[0] for r in rows)
    assert all(r[4] is not None for r in rows)
    assert progress_offsets(q, "endOffset") == {"0": 1000, "1": 1000, "2": 1000}


def test_multi_record_batches_from_latest_read_only_new_records(source, bootstrap, topics, tmp_path):
    """ "latest" must be the real end on Tansu: with ListOffsets' end, part of the first (multi-record)
    batch would be read again."""
    t = topics(b=1)["b"]
    produce(bootstrap, t, [(0, None, b"old")] * 300, linger_ms=100)
    ck = tmp_path / "ck"
    batches, _ = run(source, bootstrap, t, ck, startingOffsets="latest")
    assert offsets_of(batches) == []
    produce(bootstrap, t, [(0, None, b"new")] * 200, linger_ms=100)
    batches, _ = run(source, bootstrap, t, ck, startingOffsets="latest")
    rows = [r for _, rs in batches for r in rs]
    assert sorted(r[1] for r in rows) == list(range(300, 500))
    assert {r[3] for r in rows} == {b"new"}


def test_max_records_per_trigger_makes_bounded_batches(source, bootstrap, topics, tmp_path):
    t = topics(c=3)["c"]
    produce(bootstrap, t, keyed(900))
    batches, _ = run(source, bootstrap, t, tmp_path / "ck", startingOffsets="earliest", maxRecordsPerTrigger="200")
    sizes = [len(rows) for _, rows in batches if rows]
    assert len(sizes) >= 5 and max(sizes) <= 200, sizes
    got = offsets_of(batches)
    assert sorted(got) == sorted({(p, o) for p in range(3) for o in range(300)})


def test_starting_offsets_json_reads_exactly_the_range(source, bootstrap, topics, tmp_path):
    t = topics(d=3)["d"]
    produce(bootstrap, t, keyed(300))
    start = {"0": 10, "1": 0, "2": 99}
    batches, _ = run(source, bootstrap, t, tmp_path / "ck", startingOffsets=json.dumps(start))
    want = {(p, o) for p in range(3) for o in range(start[str(p)], 100)}
    got = offsets_of(batches)
    assert len(got) == len(want) and set(got) == want


def test_starting_timestamp_reads_records_at_or_after_it(source, bootstrap, topics, tmp_path):
    t = topics(ts=2)["ts"]
    base = 1_700_000_000_000
    # partition 0: ts = base + 10*i; partition 1: ts = base + 7*i; both with repeats of equal stamps
    recs = [(0, None, b"a", base + 10 * (i // 2)) for i in range(200)] + [
        (1, None, b"b", base + 7 * i) for i in range(150)
    ]
    produce(bootstrap, t, recs)
    T = base + 10 * 37  # exactly a stamp on partition 0, between stamps on partition 1
    batches, _ = run(source, bootstrap, t, tmp_path / "ck", startingTimestamp=str(T))
    rows = [r for _, rs in batches for r in rs]
    want = {(0, i) for i in range(200) if base + 10 * (i // 2) >= T} | {(1, i) for i in range(150) if base + 7 * i >= T}
    assert {(r[0], r[1]) for r in rows} == want and len(rows) == len(want)
    stamp = {0: lambda i: base + 10 * (i // 2), 1: lambda i: base + 7 * i}
    utc = UTC
    # the session time zone is UTC, so collected timestamps are naive UTC datetimes
    assert all(r[4] == datetime.fromtimestamp(stamp[r[0]](r[1]) / 1000, utc).replace(tzinfo=None) for r in rows)


def test_cap_file_stops_at_the_cap_then_continues(source, bootstrap, topics, tmp_path):
    t = topics(f=3)["f"]
    produce(bootstrap, t, keyed(300))
    cap = tmp_path / "cap.json"
    cap.write_text(json.dumps({"0": 40, "1": 0, "2": 77}))
    ck = tmp_path / "ck"
    batches, q = run(source, bootstrap, t, ck, startingOffsets="earliest", capFile=str(cap))
    got = offsets_of(batches)
    assert sorted(got) == sorted({(0, o) for o in range(40)} | {(2, o) for o in range(77)})
    assert progress_offsets(q, "endOffset") == {"0": 40, "1": 0, "2": 77}
    if source.read_on == "executors":  # Spark asks a driver-side (simple) reader for no latest offset
        assert progress_offsets(q, "latestOffset") == {"0": 100, "1": 100, "2": 100}  # uncapped: lag is visible
    # Still capped: a new run reads nothing.
    batches, _ = run(source, bootstrap, t, ck, startingOffsets="earliest", capFile=str(cap))
    assert offsets_of(batches) == []
    # Raise the cap (atomically, as the control plane does): exactly the next stretch is read.
    tmp = tmp_path / "cap.json.tmp"
    tmp.write_text(json.dumps({"0": 100, "1": 60, "2": 80}))
    tmp.replace(cap)
    batches, _ = run(source, bootstrap, t, ck, startingOffsets="earliest", capFile=str(cap))
    got2 = offsets_of(batches)
    assert sorted(got2) == sorted(
        {(0, o) for o in range(40, 100)} | {(1, o) for o in range(60)} | {(2, o) for o in range(77, 80)}
    )
    # No cap file: no cap.
    cap.unlink()
    batches, _ = run(source, bootstrap, t, ck, startingOffsets="earliest", capFile=str(cap))
    got3 = offsets_of(batches)
    assert sorted(got3) == sorted({(1, o) for o in range(60, 100)} | {(2, o) for o in range(80, 100)})


def transactional(bootstrap, topic, txns, per_txn, partitions):
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}", "linger.ms": 5})
    p.init_transactions(15)
    for t in range(txns):
        p.begin_transaction()
        for i in range(per_txn):
            for part in range(partitions):
                p.produce(topic, value=json.dumps({"t": t, "i": i}).encode(), partition=part)
        p.commit_transaction(15)


def data_offsets(bootstrap, topic, partition):
    """Offsets of data records, read with a plain consumer (markers excluded)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "probe",
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, partition, 0)])
    out = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            break  # partition EOF
        out.append(m.offset())
    c.close()
    return out


def test_transactional_topic_is_read_fully_without_hanging(source, bootstrap, topics, tmp_path):
    t = topics(tx=2)["tx"]
    transactional(bootstrap, t, txns=4, per_txn=5, partitions=2)
    expected = {(p, o) for p in range(2) for o in data_offsets(bootstrap, t, p)}
    assert len(expected) == 40
    assert max(o for _, o in expected) > 20  # markers occupy offsets: 4 per partition
    t0 = time.monotonic()
    # 5 offsets per partition per batch, 6 per transaction: ranges start and end on markers and
    # inside transactions.
    batches, _ = run(source, bootstrap, t, tmp_path / "ck", startingOffsets="earliest", maxRecordsPerTrigger="10")
    elapsed = time.monotonic() - t0
    got = offsets_of(batches)
    assert len(got) == len(set(got)) and set(got) == expected
    assert elapsed < 30, elapsed


def test_read_stops_at_an_end_that_is_a_transaction_marker(bootstrap, topics):
    """Executor read, in-process: a range whose last offsets are markers ends promptly."""
    t = topics(tr=1)["tr"]
    transactional(bootstrap, t, txns=3, per_txn=5, partitions=1)
    data = data_offsets(bootstrap, t, 0)
    assert data == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16]  # markers at 5, 11, 17
    reader = KafkaSource({"kafka.bootstrap.servers": bootstrap, "topic": t}).streamReader(SCHEMA)
    try:
        assert reader.available_ends([0]) == {0: 18}
        for start, end in [(0, 18), (0, 6), (3, 12), (5, 6), (6, 11), (0, 17)]:
            t0 = time.monotonic()
            batches = list(reader.read(KafkaInputPartition(t, 0, start, end)))
            offs = [o for b in batches for o in b.column("offset").to_pylist()]
            assert offs == [o for o in data if start <= o < end], (start, end)
            assert time.monotonic() - t0 < 5, (start, end)
            for b in batches:
                assert b.schema.names == SCHEMA.names
    finally:
        reader.stop()


def test_bad_option_fails_the_query_with_a_clear_message(source, bootstrap, topics, tmp_path):
    t = topics(g=1)["g"]
    with pytest.raises(Exception, match=r"startingOffsets.*partitions \[3\]"):
        run(source, bootstrap, t, tmp_path / "ck", startingOffsets='{"0": 0, "3": 0}')
