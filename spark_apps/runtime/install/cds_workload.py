"""What a slot's driver does, in small, run by spark_apps.runtime.install.cds to build its class-data-sharing
archive: the classes this loads go into the archive.

    python -m spark_apps.runtime.install.cds_workload TMP_DIR    # with BATON_CDS_DUMP naming the archive to dump
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def workload(tmp: Path) -> None:
    """What a slot's driver does, in small: the classes it loads go into the archive."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DataType

    from baton.apps import AppDefinition, TopicRef
    from spark_apps.runtime.source.kafka_source import KafkaSource
    from spark_apps.runtime.spark import session

    app = AppDefinition(
        name="cds",
        module="spark_apps.apps.click_counts",
        version="v1",
        input=TopicRef("in", 2),
        output=TopicRef("out", 2),
    )
    spark = session(
        "baton-cds", app, {"spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={os.environ['BATON_CDS_DUMP']}"}
    )
    spark.dataSource.register(KafkaSource)
    DataType.fromDDL("user_id STRING, timestamp LONG")
    checkpoint = str(tmp / "checkpoint")
    events = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 2000)
        .load()
        .select((F.col("value") % 100).cast("string").alias("user_id"), F.col("value").alias("timestamp"))
    )
    counts = events.groupBy("user_id").agg(F.count(F.lit(1)).alias("count"))
    out = counts.select(
        F.col("user_id").cast("binary").alias("key"),
        F.to_json(F.struct("user_id", "count")).cast("binary").alias("value"),
    )
    query = (
        out.writeStream.outputMode("update")
        .foreachBatch(lambda df, _id: df.toArrow())
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        while len(query.recentProgress) < 3:
            if query.awaitTermination(0.5):
                raise RuntimeError(f"the workload's query ended: {query.exception()}")
    finally:
        query.stop()
    state = spark.read.format("statestore").load(checkpoint)
    state.select(F.count(F.lit(1)), F.bit_xor(F.xxhash64("key", "value"))).first()
    spark.stop()


if __name__ == "__main__":
    workload(Path(sys.argv[1]))
