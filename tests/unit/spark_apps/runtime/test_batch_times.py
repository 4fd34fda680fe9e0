"""A batch's end-to-end latency and its events: the reader leaves its records' times and count by end
offsets, the harness finds the batch it reports, measures from them to the batch's end and counts its
events (not Spark's rows, which may be packed)."""

import json

from spark_apps.runtime.coordination.progress import (
    batch_latencies,
    batch_times_of,
    status_from_progress,
    with_event_count,
)
from spark_apps.runtime.source.batch_times import KEEP, BatchTimes, BatchTimesFile, read_batch_times


def progress(batch_id, end, rows=10, started="2026-11-26T10:00:00.000Z", took=400, start=None, rate=None):
    source = {"endOffset": json.dumps(end), "startOffset": json.dumps(start) if start is not None else None}
    return {
        "batchId": batch_id,
        "numInputRows": rows,
        "timestamp": started,
        "durationMs": {"triggerExecution": took},
        "sources": [source],
        "inputRowsPerSecond": rate,
        "processedRowsPerSecond": rate,
    }


def latencies(p, path):
    return batch_latencies(p, batch_times_of(p, path))


T0 = 1_795_687_200_000  # 2026-11-26T10:00:00Z


def test_the_harness_finds_its_batch_by_end_offsets_and_measures_to_the_batch_end(tmp_path):
    path = tmp_path / "batch-times.json"
    f = BatchTimesFile(path)
    f.add(BatchTimes({0: 10, 1: 5}, T0 - 900, T0 - 100))
    f.add(BatchTimes({0: 20, 1: 5}, T0 - 50, T0 + 200))
    # The first batch ended 400 ms after its trigger started: oldest record 1300 ms old, newest 500 ms.
    assert latencies(progress(1, {"0": 10, "1": 5}), path) == (1300, 500)
    assert latencies(progress(2, {"0": 20, "1": 5}), path) == (450, 200)
    assert latencies(progress(3, {"0": 30, "1": 5}), path) == (None, None)  # not (yet) written
    assert latencies(progress(1, {"0": 10, "1": 5}, rows=0), path) == (None, None)  # no input
    assert latencies(progress(1, {"0": 10, "1": 5}), tmp_path / "absent") == (None, None)


def test_the_file_keeps_the_last_batches_and_a_damaged_file_is_unknown_not_an_error(tmp_path):
    path = tmp_path / "batch-times.json"
    f = BatchTimesFile(path)
    for i in range(KEEP + 3):
        f.add(BatchTimes({0: i}, i, i))
    assert read_batch_times(path, {0: 2}) is None
    assert read_batch_times(path, {0: KEEP + 2}) == BatchTimes({0: KEEP + 2}, KEEP + 2, KEEP + 2)
    path.write_text("{not json")
    assert read_batch_times(path, {0: 1}) is None
    BatchTimesFile(tmp_path / "gone" / "batch-times.json").add(BatchTimes({0: 1}, 1, 1))  # no directory: ignored


def test_the_count_round_trips_and_a_batch_without_timestamps_still_leaves_it(tmp_path):
    path = tmp_path / "batch-times.json"
    f = BatchTimesFile(path)
    f.add(BatchTimes({0: 10}, None, None, 7))
    f.add(BatchTimes({0: 20}, T0 - 50, T0, 10))
    assert read_batch_times(path, {0: 10}) == BatchTimes({0: 10}, None, None, 7)
    assert latencies(progress(1, {"0": 10}), path) == (None, None)  # no timestamps: no latency
    assert read_batch_times(path, {0: 20}).records == 10
    path.write_text(json.dumps([{"end": {"0": 5}, "oldest_ms": 1, "newest_ms": 2}]))  # an older reader's file
    assert read_batch_times(path, {0: 5}) == BatchTimes({0: 5}, 1, 2, None)


def test_packed_rows_are_counted_as_the_events_the_reader_handed_spark():
    # 12 packed rows holding 24,000 events, read in 0.5 s: the status says 24,000 and 48,000 a second.
    p = progress(1, {"0": 30_000}, rows=12, start={"0": 5_000}, rate=24.0)
    counted = with_event_count(p, BatchTimes({0: 30_000}, None, None, 24_000), packed=True)
    st = status_from_progress(counted)
    assert (st["input_rows"], st["input_rate"], st["processing_rate"]) == (24_000, 48_000.0, 48_000.0)


def test_without_the_readers_count_packed_rows_fall_back_to_the_offsets_read_and_flat_rows_stay():
    p = progress(1, {"0": 30_000, "1": 700}, rows=12, start={"0": 5_000, "1": 200}, rate=24.0)
    assert with_event_count(p, None, packed=True)["numInputRows"] == 25_500  # a replayed batch
    assert with_event_count(p, None, packed=False) is p  # unpacked: Spark's rows are the events
    # A partition new since the last batch counts from where this batch read it (unknown: nothing).
    assert (
        with_event_count(progress(1, {"0": 30_000, "1": 9}, rows=3, start={"0": 5_000}), None, packed=True)[
            "numInputRows"
        ]
        == 25_000
    )
    assert (
        with_event_count(progress(1, {"0": 1}, rows=0), BatchTimes({0: 1}, 1, 1, 5), packed=True)["numInputRows"] == 0
    )
