"""`state.count_rows` on real Spark with the slots' RocksDB state store: without the count the state is
the same and Spark reports no rows; a later start with the count on counts the checkpoint's keys as it
loads them, so an app may turn it back on at any restart."""

from pyspark.sql import functions as F

from tests.support.rate_counts import run_rate_counts

KEYS = 50
RUN_CONF = {
    "spark.sql.streaming.stateStore.providerClass": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.shuffle.partitions": "1",
}
TRACK = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"


def state_only(progress: dict) -> dict:
    """The progress without its source (the rate source's offset is a number, not Kafka positions)."""
    return {**progress, "sources": []}


def test_without_the_row_count_the_state_is_the_same_and_a_later_start_counts_it_again(spark, tmp_path):
    from spark_apps.runtime.coordination.progress import status_from_progress

    before = {k: spark.conf.get(k, None) for k in (*RUN_CONF, TRACK)}
    try:
        for k, v in RUN_CONF.items():
            spark.conf.set(k, v)
        checkpoint = str(tmp_path / "checkpoint")

        spark.conf.set(TRACK, "false")
        uncounted = run_rate_counts(spark, checkpoint, 3, keys=KEYS)
        assert uncounted["stateOperators"][0]["numRowsTotal"] == 0  # Spark keeps no count: reports 0
        assert status_from_progress(state_only(uncounted), rows_counted=False)["state_rows"] is None
        state = spark.read.format("statestore").load(checkpoint)
        assert state.count() == KEYS  # every key's state is there all the same
        counted_events = state.select(F.sum("value.count")).first()[0]
        assert counted_events >= uncounted["numInputRows"] > 0

        spark.conf.set(TRACK, "true")
        counted = run_rate_counts(spark, checkpoint, 2, keys=KEYS)  # restarted on the same checkpoint, the count on
        assert counted["stateOperators"][0]["numRowsTotal"] == KEYS
        assert status_from_progress(state_only(counted))["state_rows"] == KEYS
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
