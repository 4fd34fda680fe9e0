"""A streaming count by key over Spark's rate source, for tests of what a checkpoint's state keeps
across restarts under changed settings (no broker, no Baton source)."""

import json
import time


def run_rate_counts(spark, checkpoint: str, batches: int, keys: int = 50) -> dict:
    """Counts `value % keys` on the rate source until `batches` more batches with input have run on
    `checkpoint`; returns the last one's progress as the slot's listener hands it over (JSON)."""
    from pyspark.sql import functions as F

    events = (
        spark.readStream.format("rate").option("rowsPerSecond", 200).load().select((F.col("value") % keys).alias("key"))
    )
    query = (
        events.groupBy("key")
        .count()
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while sum(1 for p in query.recentProgress if p["numInputRows"] > 0) < batches:
            assert time.monotonic() < deadline, "the query ran no batches in 120 s"
            assert not query.awaitTermination(0.2), f"the query ended: {query.exception()}"
        return json.loads([p for p in query.recentProgress if p["numInputRows"] > 0][-1].json)
    finally:
        query.stop()
