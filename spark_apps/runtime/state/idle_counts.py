"""A running count per key with an event-time TTL, in the JVM (jvm/src/baton/ttl/IdleCounts.java).

A key not seen for `ttl.idle_ms` of event time leaves the state, and its next event starts its count
afresh. Which events a count includes is decided by the events' times alone (an event more than idle
after the key's previous one begins a new life), so every slot, every reprocess and every restart
count the same, whatever their batches; dropping the state is garbage collection by Spark's event-time
timeout, once the watermark (the newest event time seen, minus `ttl.disorder_ms`) passes the key's last
event + idle. That happens at batch boundaries, so two slots drop a key at different input positions:
`live_state` is the state both hold at one position, what their digests compare.

Assumes a key's events arrive in event-time order, as one producer per key writing to the key's Kafka
partition gives (a batch's events of a key are sorted first). An event further behind the newest event
time than `disorder_ms` (e.g. a partition lagging the others) may find its key already dropped on one
slot and not on another: keep `disorder` above the input's skew.

Chosen over Spark's alternatives (docs/operations.md, "State TTL"): session windows cannot emit a running count
(Spark refuses update mode for them), and a Python per-group state API pays a Python call per key per
batch.
"""

from __future__ import annotations

from pathlib import Path

from baton.apps import StateTtl

# Built by `make install` (Makefile: javac against the installed Spark's jars).
JAR = Path(__file__).resolve().parents[3] / ".venv" / "baton-jvm.jar"


def jar() -> Path:
    if not JAR.is_file():
        raise RuntimeError(
            f"state.ttl needs Baton's JVM operators, {JAR}, which `make install` builds with javac "
            "(a Java 17+ JDK): run `make install`"
        )
    return JAR


def idle_counts(events, key: str, event_time: str, ttl: StateTtl):
    """(key, count, last_ms) per key, in update mode: `events`' `key` column and its `event_time`
    (a timestamp column), counted per life of the key."""
    from pyspark.sql import DataFrame

    spark = events.sparkSession
    watermarked = events.withWatermark(event_time, f"{ttl.disorder_ms} milliseconds")
    jvm = spark.sparkContext._jvm
    operator = jvm.baton.ttl.IdleCounts
    return DataFrame(operator.apply(watermarked._jdf, key, event_time, ttl.idle_ms), spark)


def live_state(state, ttl: StateTtl):
    """The rows of an IdleCounts state (Spark's raw state frame: `key` and `value` structs, as
    state_check.digest_state reads it) still alive at the position the state stands at: a key whose
    last event + idle is behind the watermark there (the newest last event time in the state minus
    disorder) is gone or about to go, depending on the slot's batches, so it is left out. Both slots'
    digests at one position then see the same rows."""
    from pyspark.sql import functions as F

    newest = state.agg(F.max("value.groupState.lastMs").alias("m")).first()["m"]
    if newest is None:
        return state
    watermark = newest - ttl.disorder_ms
    return state.where(F.col("value.groupState.lastMs") + F.lit(ttl.idle_ms) >= F.lit(watermark))
