"""`state.count_rows` on real Spark with the slots' RocksDB state store: without the count the state is
the same and Spark reports no rows; a later start with the count on counts the checkpoint's keys as it
loads them, so an app may turn it back on at any restart."""

import json
import time

from pyspark.sql import functions as F

KEYS = 50
RUN_CONF = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.shuffle.partitions": "1",
}
TRACK = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"


def run_batches(spark, checkpoint: str, batches: int) -> dict:
    """A streaming count by key on the rate source until `batches` more batches with input have run;
    returns the last one's progress as the slot's listener hands it over (JSON)."""
    events = (spark.readStream.format("rate").option("rowsPerSecond", 200).load()
              .select((F.col("value") % KEYS).alias("key")))
    query = (events.groupBy("key").count().writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", checkpoint).trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 120
        while sum(1 for p in query.recentProgress if p["numInputRows"] > 0) < batches:
            assert time.monotonic() < deadline, "the query ran no batches in 120 s"
            assert not query.awaitTermination(0.2), f"the query ended: {query.exception()}"
        return json.loads([p for p in query.recentProgress if p["numInputRows"] > 0][-1].json)
    finally:
        query.stop()


def state_only(progress: dict) -> dict:
    """The progress without its source (the rate source's offset is a number, not Kafka positions)."""
    return {**progress, "sources": []}


def test_without_the_row_count_the_state_is_the_same_and_a_later_start_counts_it_again(spark, tmp_path):
    from spark_apps.runtime.progress import status_from_progress

    before = {k: spark.conf.get(k, None) for k in (*RUN_CONF, TRACK)}
    try:
        for k, v in RUN_CONF.items():
            spark.conf.set(k, v)
        checkpoint = str(tmp_path / "checkpoint")

        spark.conf.set(TRACK, "false")
        uncounted = run_batches(spark, checkpoint, 3)
        assert uncounted["stateOperators"][0]["numRowsTotal"] == 0  # Spark keeps no count: reports 0
        assert status_from_progress(state_only(uncounted), rows_counted=False)["state_rows"] is None
        state = spark.read.format("statestore").load(checkpoint)
        assert state.count() == KEYS  # every key's state is there all the same
        counted_events = state.select(F.sum("value.count")).first()[0]
        assert counted_events >= uncounted["numInputRows"] > 0

        spark.conf.set(TRACK, "true")
        counted = run_batches(spark, checkpoint, 2)  # restarted on the same checkpoint, the count on
        assert counted["stateOperators"][0]["numRowsTotal"] == KEYS
        assert status_from_progress(state_only(counted))["state_rows"] == KEYS
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
