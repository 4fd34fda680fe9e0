"""Per-user click counts (the seed example).

In:  `clicks`, JSON events {"user_id": "alice", "timestamp": 1678886400}
Out: `user_counts`, key = user_id, value = {"user_id": "alice", "count": 42}: the running count.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

VALUE_SCHEMA = "user_id STRING, timestamp LONG"
REQUIRED = ("user_id", "timestamp")


def transform(events: DataFrame) -> DataFrame:
    counts = events.groupBy("user_id").agg(F.count(F.lit(1)).alias("count"))
    return counts.select(
        F.col("user_id").alias("key"),
        F.to_json(F.struct("user_id", "count")).alias("value"),
    )
