"""Per-user click counts in tumbling event-time windows, with state that is evicted.

In:  `clicks`, JSON events {"user_id": "alice", "timestamp": 1678886400} (epoch seconds, event time)
Out: `user_click_windows`, key = "alice@1678886400" (user, the last "@", window start), value =
     {"user_id": "alice", "window_start": 1678886400, "window_end": 1678886410, "count": 7}.

The harness runs output mode "update": every micro-batch emits the windows it changed with their
count so far, so a window's count is visible one trigger after its events arrive (not after the
window closes); downstream keeps the last value per key. A window's state is dropped once the
watermark (the largest event time seen, minus WATERMARK_DELAY_S) passes its end, so the state holds
only the windows still open and cannot grow with the number of users ever seen. Spark advances the
watermark between micro-batches; with no-data batches off (spark.py) the drop happens in the next
batch that has data.

An event for a window that was already dropped (more than WATERMARK_DELAY_S behind the largest
event time, measured at batch boundaries) is not counted: Spark filters it and reports it as
`numRowsDroppedByWatermark` in the query progress. The watermark is global, over all input
partitions: a partition that lags the others by more than WATERMARK_DELAY_S of event time has its
events dropped as late, and one event stamped far in the future (a timestamp in milliseconds)
moves the watermark there and makes every later event late.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

VALUE_SCHEMA = "user_id STRING, timestamp LONG"
REQUIRED = ("user_id", "timestamp")

# Ten seconds is the seed's freshness SLA ("aggregated data available within 10 s"): a window is
# the unit a consumer reads as one figure, and short windows keep few keys per window in state.
WINDOW_S = 10
# How far behind the newest event an event may arrive and still be counted. State holds up to
# (WINDOW_S + WATERMARK_DELAY_S + one batch's event-time span) / WINDOW_S windows of keys (see
# max_windows_in_state), so this is the knob that trades tolerated disorder (producer retries,
# partition skew) against state size. One window's worth covers the disorder of a healthy
# pipeline; it does not delay output (update mode emits at once).
WATERMARK_DELAY_S = 10


def transform(events: DataFrame) -> DataFrame:
    windowed = (
        events.withColumn("event_time", F.timestamp_seconds("timestamp"))
        .withWatermark("event_time", f"{WATERMARK_DELAY_S} seconds")
        .groupBy(F.window("event_time", f"{WINDOW_S} seconds").alias("w"), "user_id")
        .agg(F.count(F.lit(1)).alias("count"))
    )
    out = windowed.select(
        "user_id",
        F.unix_seconds(F.col("w.start")).alias("window_start"),
        F.unix_seconds(F.col("w.end")).alias("window_end"),
        "count",
    )
    return out.select(
        F.concat_ws("@", "user_id", F.col("window_start").cast("string")).alias("key"),
        F.to_json(F.struct("user_id", "window_start", "window_end", "count")).alias("value"),
    )


def window_start(ts: int) -> int:
    """The start (epoch seconds) of the window an event at `ts` falls in, as Spark computes it."""
    return ts - ts % WINDOW_S


def max_windows_in_state(batch_span_s: int) -> int:
    """At most how many windows per user the state holds after a micro-batch whose events reach at
    most `batch_span_s` seconds past the largest event time of the batches before it.

    A batch evicts with the watermark of the batches before it, w = max_before - WATERMARK_DELAY_S,
    and keeps a window while its end > w; its newest window starts at or before max_before +
    batch_span_s. The starts kept lie in (w - WINDOW_S, max_before + batch_span_s], a half-open
    interval of WINDOW_S + WATERMARK_DELAY_S + batch_span_s seconds, holding at most the ceiling of
    that over WINDOW_S window starts.
    """
    if batch_span_s < 0:
        raise ValueError(f"batch_span_s must be >= 0, got {batch_span_s}")
    return -(-(WINDOW_S + WATERMARK_DELAY_S + batch_span_s) // WINDOW_S)
