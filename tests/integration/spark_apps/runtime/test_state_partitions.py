"""A checkpoint keeps the number of state partitions it was started with: an app definition whose
`state.partitions` changed (or a Baton whose default did) restarts a running app's slots on the
checkpoint's own number, never re-partitioning its state; a new checkpoint takes the new number."""

import time

from pyspark.sql import functions as F


def run_batches(spark, checkpoint: str, batches: int) -> None:
    """A streaming count by key on the rate source until `batches` more batches have run."""
    events = (spark.readStream.format("rate").option("rowsPerSecond", 200).load()
              .select((F.col("value") % 50).alias("key")))
    query = (events.groupBy("key").count().writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", checkpoint).trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 120
        while sum(1 for p in query.recentProgress if p["numInputRows"] > 0) < batches:
            assert time.monotonic() < deadline, "the query ran no batches in 120 s"
            assert not query.awaitTermination(0.2), f"the query ended: {query.exception()}"
    finally:
        query.stop()


def state_partitions(spark, checkpoint: str) -> set[int]:
    """The number of state partitions each stateful operator of the checkpoint records."""
    rows = spark.read.format("state-metadata").load(checkpoint).collect()
    assert rows, "the checkpoint has no state operator"
    return {r["numPartitions"] for r in rows}


def test_a_checkpoint_keeps_its_state_partitions_when_the_setting_changes(spark, tmp_path):
    before = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        old, new = str(tmp_path / "old"), str(tmp_path / "new")
        spark.conf.set("spark.sql.shuffle.partitions", "4")
        run_batches(spark, old, 2)
        assert state_partitions(spark, old) == {4}

        spark.conf.set("spark.sql.shuffle.partitions", "1")
        run_batches(spark, old, 2)  # restarted: the checkpoint's 4 win over the session's 1
        assert state_partitions(spark, old) == {4}
        run_batches(spark, new, 2)
        assert state_partitions(spark, new) == {1}
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
