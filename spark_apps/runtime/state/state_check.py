"""What a slot's state holds, read back from its checkpoint: the digests behind the rolling upgrade's
restore check and state check, and the copies a standby or a new generation starts from.

A digest reads one committed state version through Spark's state data source (`statestore`), so it
is what a restarted query would restore, not what an in-memory counter says. The hash is
order-independent (xor of xxhash64 over each (key, value) row): two slots that built the same state
through different batch boundaries agree. The schema is the state's key and value types, as stored.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from baton.checkpoints import state_operators
from baton.records import StateDigest


def digest_state(spark, checkpoint: Path, batch_id: int, at: str, live: Callable | None = None) -> StateDigest:
    """The digest of the state every operator held after `batch_id` (committed). A stateless query
    has the empty digest (0 rows). `live(state) -> state`: the rows alive at that position, for state
    that slots drop at different positions (an event-time TTL: spark_apps.runtime.state.idle_counts)."""
    from pyspark.sql import functions as F

    rows, digest, schemas = 0, 0, []
    for op in state_operators(checkpoint):
        frame = (
            spark.read.format("statestore").option("batchId", batch_id).option("operatorId", op).load(str(checkpoint))
        )
        fields = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
        if live is not None:
            frame = live(frame)
        schemas.append(f"{op}:key={fields.get('key')};value={fields.get('value')}")
        # One task reads every state partition in turn: the digest holds one of the slot's task slots,
        # never both, so a batch of the query (an active serving output) always finds one free.
        got = (
            frame.coalesce(1)
            .select(F.count(F.lit(1)).alias("n"), F.bit_xor(F.xxhash64("key", "value")).alias("x"))
            .first()
        )
        rows += int(got["n"])
        digest ^= int(got["x"] or 0)
    return StateDigest(
        at=at,
        batch_id=batch_id,
        rows=rows,
        digest=f"{digest & (2**64 - 1):016x}",
        schema=" ".join(schemas),
        ts_ms=int(time.time() * 1000),
    )


def state_frame(spark, checkpoint: Path, batch_id: int, operator: int = 0):
    """The state after `batch_id` as a frame of the key's and the value's columns (`user_id`, `count`)."""
    return (
        spark.read.format("statestore")
        .option("batchId", batch_id)
        .option("operatorId", operator)
        .load(str(checkpoint))
        .select("key.*", "value.*")
    )


def state_output(spark, checkpoint: Path, batch_id: int, module) -> list[tuple[bytes | None, bytes | None]]:
    """The app's output record for every key of its state after `batch_id` (the module's
    state_output(state) -> key, value): a corrected-output cutover publishes these."""
    if not hasattr(module, "state_output"):
        raise ValueError(f"{module.__name__} has no state_output(state): it cannot publish corrected output")
    # One task, as for a digest: the read runs beside the new active's batches and must leave them a
    # task slot (with both taken, the active's batches waited: its longest output gap 2.2 s at 100k keys).
    return output_records(module, state_frame(spark, checkpoint, batch_id).coalesce(1))


def output_records(module, state) -> list[tuple[bytes | None, bytes | None]]:
    """The module's output record (key, value) for every row of the state frame `state`."""
    from pyspark.sql import functions as F

    table = (
        module.state_output(state)
        .select(F.col("key").cast("binary").alias("key"), F.col("value").cast("binary").alias("value"))
        .toArrow()
    )
    return list(zip(table.column("key").to_pylist(), table.column("value").to_pylist()))
