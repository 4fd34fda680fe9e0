"""Per-user click counts, v2: the same state as v1 (a count per user), so a rolling upgrade from v1
restores it and both versions agree on it exactly; the output also says which version wrote it.

Out: `user_counts`, value = {"user_id": "alice", "count": 42, "v": 2}.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_apps.apps.click_counts import OUTPUT_IS_STATE, REQUIRED, VALUE_SCHEMA, check_state

__all__ = ["OUTPUT_IS_STATE", "REQUIRED", "VALUE_SCHEMA", "check_state", "state_output", "transform"]


def output(counts: DataFrame) -> DataFrame:
    return counts.select(
        F.col("user_id").alias("key"), F.to_json(F.struct("user_id", "count", F.lit(2).alias("v"))).alias("value")
    )


def transform(events: DataFrame) -> DataFrame:
    return output(events.groupBy("user_id").agg(F.count(F.lit(1)).alias("count")))


def state_output(state: DataFrame) -> DataFrame:
    return output(state)
