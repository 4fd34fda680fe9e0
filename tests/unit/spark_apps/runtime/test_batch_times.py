"""A batch's end-to-end latency: the reader leaves its records' times by end offsets, the harness finds the
batch it reports and measures from them to the batch's end."""

import json

from spark_apps.runtime.batch_times import KEEP, BatchTimes, BatchTimesFile, read_batch_times
from spark_apps.runtime.progress import batch_latencies


def progress(batch_id, end, rows=10, started="2026-11-26T10:00:00.000Z", took=400):
    return {"batchId": batch_id, "numInputRows": rows, "timestamp": started,
            "durationMs": {"triggerExecution": took}, "sources": [{"endOffset": json.dumps(end)}]}


T0 = 1_795_687_200_000  # 2026-11-26T10:00:00Z


def test_the_harness_finds_its_batch_by_end_offsets_and_measures_to_the_batch_end(tmp_path):
    path = tmp_path / "batch-times.json"
    f = BatchTimesFile(path)
    f.add(BatchTimes({0: 10, 1: 5}, T0 - 900, T0 - 100))
    f.add(BatchTimes({0: 20, 1: 5}, T0 - 50, T0 + 200))
    # The first batch ended 400 ms after its trigger started: oldest record 1300 ms old, newest 500 ms.
    assert batch_latencies(progress(1, {"0": 10, "1": 5}), path) == (1300, 500)
    assert batch_latencies(progress(2, {"0": 20, "1": 5}), path) == (450, 200)
    assert batch_latencies(progress(3, {"0": 30, "1": 5}), path) == (None, None)  # not (yet) written
    assert batch_latencies(progress(1, {"0": 10, "1": 5}, rows=0), path) == (None, None)  # no input
    assert batch_latencies(progress(1, {"0": 10, "1": 5}), tmp_path / "absent") == (None, None)


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
