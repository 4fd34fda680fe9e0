"""Per-user click counts, v3: also the last time each user clicked. That adds a column to the
aggregation's persisted state, so v1's or v2's state cannot be restored into it (the seed's
"careful with persisted schemas"): a rolling upgrade to v3 is refused at preflight, before any slot
is touched. Reaching v3 takes a reprocess (a new generation with fresh state).

Out: `user_counts`, value = {"user_id": "alice", "count": 42, "last_seen": 1678886400}.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_apps.apps.click_counts import REQUIRED, VALUE_SCHEMA

__all__ = ["REQUIRED", "VALUE_SCHEMA", "transform"]


def transform(events: DataFrame) -> DataFrame:
    counts = events.groupBy("user_id").agg(F.count(F.lit(1)).alias("count"), F.max("timestamp").alias("last_seen"))
    return counts.select(
        F.col("user_id").alias("key"),
        F.to_json(F.struct("user_id", "count", "last_seen")).alias("value"),
    )
