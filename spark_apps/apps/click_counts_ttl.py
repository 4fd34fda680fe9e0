"""Per-user click counts that forget a user idle for a while (click_counts with a state TTL).

In:  `clicks`, JSON events {"user_id": "alice", "timestamp": 1678886400} (epoch seconds, event time)
Out: `user_counts_ttl`, key = user_id, value = {"user_id": "alice", "count": 42, "last_seen": 1678886400}:
     the user's count since the start of their current life, and their newest event time.

A user not seen for the definition's `state.ttl.idle` of event time leaves the state; their next event
starts a new life with count 1. Nothing is emitted when a user's life ends: the last count stays on the
compacted output until the user comes back. spark_apps.runtime.state.idle_counts says how this stays the same
on every slot.

State: one row per user alive, key (the user id), value (count, lastMs: the user's newest event time).
`state_output` and `check_state` get the state's key and value columns flattened (`value`, `groupState`);
`state_live` gets the raw frame (`key`, `value` structs), which the state digest hashes.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from baton.apps import StateTtl
from spark_apps.runtime.state.idle_counts import idle_counts, live_state

VALUE_SCHEMA = "user_id STRING, timestamp LONG"
REQUIRED = ("user_id", "timestamp")


def output(counts: DataFrame) -> DataFrame:
    """Rows with `user_id`, `count` and `last_ms` -> the output records."""
    return counts.select(
        F.col("user_id").alias("key"),
        F.to_json(F.struct("user_id", "count", (F.col("last_ms") / 1000).cast("long").alias("last_seen"))).alias(
            "value"
        ),
    )


def transform(events: DataFrame, ttl: StateTtl) -> DataFrame:
    timed = events.withColumn("event_time", F.timestamp_seconds("timestamp"))
    return output(idle_counts(timed, "user_id", "event_time", ttl).withColumnRenamed("key", "user_id"))


def users(state: DataFrame) -> DataFrame:
    """The state's key and value columns (spark_apps.runtime.state.state_check.state_frame: `value`, the user,
    and `groupState`: count, lastMs) -> `user_id`, `count`, `last_ms`."""
    return state.select(
        F.col("value").alias("user_id"),
        F.col("groupState.count").alias("count"),
        F.col("groupState.lastMs").alias("last_ms"),
    )


def state_output(state: DataFrame) -> DataFrame:
    """The output record of every user in the state (a reprocess's corrected output). A user whose life
    ended before it is not in the state: their last count stays as it was downstream."""
    return output(users(state))


def check_state(state: DataFrame) -> DataFrame:
    """Violations of the app's invariants, one row each with a `problem`: a life counts at least one click,
    at an event time after 1970."""
    return (
        users(state)
        .where((F.col("count") < 1) | (F.col("last_ms") <= 0))
        .select(
            F.concat(
                F.lit("user "),
                F.col("user_id"),
                F.lit(": count "),
                F.col("count").cast("string"),
                F.lit(", last event ms "),
                F.col("last_ms").cast("string"),
            ).alias("problem")
        )
    )


def state_live(state: DataFrame, ttl: StateTtl) -> DataFrame:
    """The users alive at the state's position, for a state check's digest. Unlike state_output and
    check_state, `state` is Spark's raw state frame (`key` and `value` structs): the digest hashes those."""
    return live_state(state, ttl)
