"""What a slot's state holds, read back from its checkpoint: the digests behind the rolling upgrade's
restore check and state check, and the copies a standby or a new generation starts from.

A digest reads one committed state version through Spark's state data source (`statestore`), so it
is what a restarted query would restore, not what an in-memory counter says. The hash is
order-independent (xor of xxhash64 over each (key, value) row): two slots that built the same state
through different batch boundaries agree. The schema is the state's key and value types, as stored.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Callable

from baton.records import StateDigest


def committed_batches(checkpoint: Path) -> list[int]:
    """Batch ids with a commit file, ascending."""
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return []
    return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())


def last_committed_batch(checkpoint: Path) -> int | None:
    batches = committed_batches(checkpoint)
    return batches[-1] if batches else None


def state_operators(checkpoint: Path) -> list[int]:
    """The stateful operators' ids (state/<id>/ folders)."""
    state = checkpoint / "state"
    if not state.is_dir():
        return []
    return sorted(int(p.name) for p in state.iterdir() if p.name.isdigit())


def digest_state(spark, checkpoint: Path, batch_id: int, at: str, live: Callable | None = None) -> StateDigest:
    """The digest of the state every operator held after `batch_id` (committed). A stateless query
    has the empty digest (0 rows). `live(state) -> state`: the rows alive at that position, for state
    that slots drop at different positions (an event-time TTL: spark_apps.runtime.idle_counts)."""
    from pyspark.sql import functions as F

    rows, digest, schemas = 0, 0, []
    for op in state_operators(checkpoint):
        frame = (spark.read.format("statestore").option("batchId", batch_id).option("operatorId", op)
                 .load(str(checkpoint)))
        fields = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
        if live is not None:
            frame = live(frame)
        schemas.append(f"{op}:key={fields.get('key')};value={fields.get('value')}")
        # One task reads every state partition in turn: the digest holds one of the slot's task slots,
        # never both, so a batch of the query (an active serving output) always finds one free.
        got = frame.coalesce(1).select(F.count(F.lit(1)).alias("n"),
                                       F.bit_xor(F.xxhash64("key", "value")).alias("x")).first()
        rows += int(got["n"])
        digest ^= int(got["x"] or 0)
    return StateDigest(at=at, batch_id=batch_id, rows=rows, digest=f"{digest & (2**64 - 1):016x}",
                       schema=" ".join(schemas), ts_ms=int(time.time() * 1000))


def state_frame(spark, checkpoint: Path, batch_id: int, operator: int = 0):
    """The state after `batch_id` as a frame of the key's and the value's columns (`user_id`, `count`)."""
    return (spark.read.format("statestore").option("batchId", batch_id).option("operatorId", operator)
            .load(str(checkpoint)).select("key.*", "value.*"))


def state_output(spark, checkpoint: Path, batch_id: int, module) -> list[tuple[bytes | None, bytes | None]]:
    """The app's output record for every key of its state after `batch_id` (the module's
    state_output(state) -> key, value): a corrected-output cutover publishes these."""
    from pyspark.sql import functions as F

    if not hasattr(module, "state_output"):
        raise ValueError(f"{module.__name__} has no state_output(state): it cannot publish corrected output")
    # One task, as for a digest: the read runs beside the new active's batches and must leave them a
    # task slot (with both taken, the active's batches waited: its longest output gap 2.2 s at 100k keys).
    table = module.state_output(state_frame(spark, checkpoint, batch_id).coalesce(1)).select(
        F.col("key").cast("binary").alias("key"), F.col("value").cast("binary").alias("value")).toArrow()
    return list(zip(table.column("key").to_pylist(), table.column("value").to_pylist()))


def copy_checkpoint(source: Path, target: Path) -> int | None:
    """Copy a checkpoint; the copy's last committed batch (None: none). The source is never written.
    Safe while the source's query runs: Spark writes each log and state file whole (rename), and
    whatever the copy caught beyond its last commit is dropped by `uncommit`."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.tmp"), copy_function=_copy_if_present)
    return last_committed_batch(target)


def _copy_if_present(src: str, dst: str) -> str:
    """A file the running query's maintenance removed between listing and copying (an old batch's log
    or state file, seen in CI) is skipped: the copy's last commit and what it needs are newer."""
    try:
        return shutil.copy2(src, dst)
    except FileNotFoundError:
        return dst


def truncate_after(checkpoint: Path, batch_id: int) -> None:
    """Make `batch_id` the checkpoint's last batch: drop every later commit and offset log entry (a
    batch the source had planned but not committed when it was copied; re-planned on start)."""
    _drop_log_entries(checkpoint, lambda log, batch: batch > batch_id)


def _drop_log_entries(checkpoint: Path, drop) -> None:
    for log in ("commits", "offsets"):
        for entry in (checkpoint / log).iterdir():
            name = entry.name.lstrip(".").removesuffix(".crc")
            if name.isdigit() and drop(log, int(name)):
                entry.unlink()
