"""Per-user click counts (the seed example).

In:  `clicks`, JSON events {"user_id": "alice", "timestamp": 1678886400}
Out: `user_counts`, key = user_id, value = {"user_id": "alice", "count": 42}: the running count.

State: one row per user, key (user_id), value (count: the aggregation's buffer, named after the
aggregate function, not the output alias). `state_output` turns it into output records (a reprocess
publishes the corrected value of every key with it); `check_state` is the app's own invariant on its
state (a reprocess checks it before the new state may take over).
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

VALUE_SCHEMA = "user_id STRING, timestamp LONG"
REQUIRED = ("user_id", "timestamp")
# Each batch emits, for every user it counted, state_output's record of the new count, and no user leaves
# the state: a reprocess's correction can keep its state image (spark_apps.runtime.state.state_image).
OUTPUT_IS_STATE = True


def output(counts: DataFrame) -> DataFrame:
    """Rows with `user_id` and `count` -> the output records."""
    return counts.select(F.col("user_id").alias("key"), F.to_json(F.struct("user_id", "count")).alias("value"))


def transform(events: DataFrame) -> DataFrame:
    return output(events.groupBy("user_id").agg(F.count(F.lit(1)).alias("count")))


def state_output(state: DataFrame) -> DataFrame:
    return output(state)


def check_state(state: DataFrame) -> DataFrame:
    """Violations of the app's invariants, one row each with a `problem`: a count is at least 1."""
    return state.where(F.col("count") < 1).select(
        F.concat(F.lit("user "), F.col("user_id"), F.lit(": count "), F.col("count").cast("string")).alias("problem")
    )
