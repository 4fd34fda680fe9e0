"""The click-count app with an injected bug (the reprocess tests' v1): every click of a user whose id
ends in 7 is counted twice. Same output format as spark_apps.apps.click_counts (v2, the fix); its
state holds the aggregation's buffer (`sum`, not `count`), which its state_output and check_state
know, so a reprocess moves from one to the other (fresh state) and the way back publishes v1's state."""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_apps.apps import click_counts
from spark_apps.apps.click_counts import OUTPUT_IS_STATE, REQUIRED, VALUE_SCHEMA, output

__all__ = ["OUTPUT_IS_STATE", "REQUIRED", "VALUE_SCHEMA", "check_state", "state_output", "transform"]


def transform(events: DataFrame) -> DataFrame:
    weight = F.when(F.col("user_id").endswith("7"), F.lit(2)).otherwise(F.lit(1)).cast("long")
    return output(events.groupBy("user_id").agg(F.sum(weight).alias("count")))


def state_output(state: DataFrame) -> DataFrame:
    return output(state.withColumnRenamed("sum", "count"))


def check_state(state: DataFrame) -> DataFrame:
    return click_counts.check_state(state.withColumnRenamed("sum", "count"))
