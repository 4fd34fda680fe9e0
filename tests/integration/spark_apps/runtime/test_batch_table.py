"""A batch collected by the active's sink leaves the stream thread's call site set (Spark gives it one
when the query starts): unset, every RDD and job of every later batch walks the thread's stack for one.
Run on real Spark, beside PySpark's own toArrow, which does unset it: if a PySpark stops doing that,
the second test says so (and batch_sink.batch_table is no longer needed)."""

from __future__ import annotations

import pytest

from spark_apps.runtime.sink.batch_sink import CALL_SITE_SHORT, batch_table

pytestmark = pytest.mark.integration


def call_sites_seen(spark, tmp_path, collect) -> list[str | None]:
    """The stream thread's call site as each of three batches starts, each batch collected by `collect`."""
    source = tmp_path / "in"
    source.mkdir()
    for i in range(3):
        (source / f"{i}.json").write_text('{"user_id": "alice"}\n')
    seen: list[str | None] = []

    def on_batch(df, _batch_id):
        seen.append(df.sparkSession.sparkContext.getLocalProperty(CALL_SITE_SHORT))
        collect(df)

    query = (
        spark.readStream.schema("user_id STRING")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .groupBy("user_id")
        .count()
        .writeStream.outputMode("update")
        .foreachBatch(on_batch)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180), "the query did not end in 180 s"
    assert query.exception() is None
    return seen


def test_the_sinks_collect_keeps_the_call_site_spark_gave_the_stream_thread(spark, tmp_path):
    seen = call_sites_seen(spark, tmp_path, batch_table)
    assert len(seen) == 3 and seen[0] is not None
    assert seen == [seen[0]] * 3


def test_pysparks_own_collect_unsets_it(spark, tmp_path):
    seen = call_sites_seen(spark, tmp_path, lambda df: df.toArrow())
    assert len(seen) == 3 and seen[0] is not None
    assert seen[1:] == [None, None]
