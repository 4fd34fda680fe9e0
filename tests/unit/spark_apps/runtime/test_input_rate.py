"""A slot's reported input rate is over the time between batches, not between triggers (a trigger
may find nothing to run)."""

from spark_apps.runtime.coordination.progress import status_from_progress, trigger_started_ms, with_input_rate


def progress(ts, rows, spark_rate):
    return {"timestamp": ts, "numInputRows": rows, "inputRowsPerSecond": spark_rate, "batchId": 7}


def test_the_rate_is_rows_over_the_time_since_the_previous_batch_started():
    previous = trigger_started_ms(progress("2026-11-25T01:43:00.000Z", 20_000, 0))
    # 20,000 rows one second after the previous batch; Spark divided by the 200 ms since the last trigger.
    p = with_input_rate(progress("2026-11-25T01:43:01.000Z", 20_000, 100_000.0), previous)
    assert p["inputRowsPerSecond"] == 20_000.0
    assert status_from_progress(p)["input_rate"] == 20_000.0


def test_without_a_previous_batch_or_rows_spark_s_figure_stays():
    p = progress("2026-11-25T01:43:01.000Z", 500, 123.0)
    assert with_input_rate(p, None)["inputRowsPerSecond"] == 123.0
    idle = progress("2026-11-25T01:43:01.000Z", 0, 0.0)
    assert with_input_rate(idle, trigger_started_ms(p) - 1000)["inputRowsPerSecond"] == 0.0
    assert (
        with_input_rate({"numInputRows": 5, "inputRowsPerSecond": 1.0}, 0)["inputRowsPerSecond"] == 1.0
    )  # no timestamp


def test_the_source_s_latest_offset_is_the_input_end_of_the_status_when_spark_reports_it():
    p = {
        **progress("2026-11-25T01:43:01.000Z", 500, 1.0),
        "sources": [{"endOffset": '{"0": 10, "1": 20}', "latestOffset": '{"0": 15, "1": 20}'}],
    }
    st = status_from_progress(
        {
            **p,
            "stateOperators": [
                {"numRowsTotal": 7, "memoryUsedBytes": 4096, "customMetrics": {"rocksdbSstFileSize": 9000}}
            ],
        }
    )
    assert st["processed"] == {0: 10, 1: 20} and st["input_end"] == {0: 15, 1: 20}
    assert (st["state_rows"], st["state_bytes"], st["state_memory_bytes"]) == (7, 9000, 4096)
    # Spark reports 0 for a count its state store does not keep (the app's state.count_rows off): none.
    uncounted = status_from_progress(
        {**p, "stateOperators": [{"numRowsTotal": 0, "memoryUsedBytes": 4096}]}, rows_counted=False
    )
    assert uncounted["state_rows"] is None and uncounted["state_memory_bytes"] == 4096
    # A simple (driver-side) reader reports none: the harness fills it in from the broker.
    assert status_from_progress({**p, "sources": [{"endOffset": {"0": 10}, "latestOffset": None}]})["input_end"] is None
