"""The query's sink (foreachBatch), gated by the slot's role: the active emits each batch's output and
dead letters exactly once (kafka_sink.TransactionalEmitter); the standby runs its batch for the state
alone. Its lock is the batch boundary the stop protocol and the corrected output wait on.

Order inside a batch (why it is safe):
1. the role is looked at before the batch runs, only to choose how to run it (collect, or noop);
2. it is looked at again after: that answer decides; an active acquires the writer at its epoch
   before it emits, so a zombie's commit fails (fenced) instead of duplicating;
3. the positions the batch ended at are noted for the follower (the cap, the handoff's gates) only
   after its output is committed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaException

from baton.apps import AppDefinition
from baton.checkpoints import read_offset_log
from baton.generations import SlotPaths
from baton.records import Role, Slot
from spark_apps.runtime.coordination.follower import Follower
from spark_apps.runtime.frame import KIND_DEAD, KIND_OUTPUT
from spark_apps.runtime.sink.correction import EmittedKeys, correction_due
from spark_apps.runtime.sink.dead_letters import collect, purge, read_initial
from spark_apps.runtime.sink.kafka_sink import TransactionalEmitter, WriterFenced
from spark_apps.runtime.state.state_image import StateImage

log = logging.getLogger(__name__)


@dataclass
class BatchCounters:
    dead_letters: int = 0
    emitted_batches: int = 0
    skipped_batches: int = 0


class SlotStopping(RuntimeError):
    """A batch that would start after the slot began stopping: raised instead of running it."""


def is_active(control, slot: Slot) -> bool:
    return control is not None and control.role_of(slot) is Role.ACTIVE


def standby_batch(df) -> None:
    """Run a standby's batch for its state alone: the noop sink consumes the rows in the JVM. Collecting
    them as Arrow (what the active does, to emit them) cost the standby a conversion and a copy of every
    output row into Python, only to drop them."""
    df.write.format("noop").mode("overwrite").save()


# The short call site Spark gives the RDDs and jobs a thread creates (SparkContext.getCallSite): unset,
# each one walks the thread's stack for it (Utils.getCallSite, ~0.1 ms a walk on the stream thread).
CALL_SITE_SHORT = "callSite.short"


def batch_table(df):
    """The batch's rows as an Arrow table (running the batch), leaving the stream thread's call site as
    it was. PySpark's toArrow sets a call site for its job and unsets it after (SCCallSiteSync), and a
    foreachBatch runs on the stream thread: from the first batch on, every RDD and job of every batch
    then walked the thread's stack for a call site Spark had been given at the query's start."""
    sc = df.sparkSession.sparkContext
    call_site = sc.getLocalProperty(CALL_SITE_SHORT)
    try:
        return df.toArrow()
    finally:
        if call_site is not None:
            sc.setLocalProperty(CALL_SITE_SHORT, call_site)


def dead_headers(reason: str, topic: str, partition: int, offset: int) -> list[tuple[str, bytes]]:
    return [("baton.reason", reason.encode()), ("baton.source", f"{topic}/{partition}/{offset}".encode())]


class RoleGatedSink:
    def __init__(
        self,
        app: AppDefinition,
        slot: Slot,
        paths: SlotPaths,
        follower: Follower,
        emitter: TransactionalEmitter,
        emitted_keys: EmittedKeys,
        mark: Callable[[str], None],
    ):
        self.app, self.slot, self.paths = app, slot, paths
        self.follower, self.emitter, self.emitted_keys, self.mark = follower, emitter, emitted_keys, mark
        self.counters = BatchCounters()
        self.lock = threading.Lock()  # held by a batch's sink: the batch boundary
        self.stopping = False  # set under the lock: no batch runs after it
        self.refused_batch = False  # a batch was refused because the slot was stopping
        self.last_batch: int | None = None  # the last batch this launch's sink ran
        self.image = StateImage()  # the state as output records, for a correction (runtime.state.state_image)

    def arm_image(self, request: str, committed: int | None) -> int | None:
        """Start the state image after the last batch this launch ran (else `committed`, the last
        committed batch: none has run since). Returns that batch, whose state the image's base must be.
        Under the lock, so no batch runs between the one returned and the first folded in."""
        with self.lock:
            after = self.last_batch if self.last_batch is not None else committed
            if after is not None:
                self.image.arm(after, request)
            return after

    def stop(self) -> None:
        """From now on no batch runs (a running batch's sink finishes first: the lock)."""
        with self.lock:
            self.stopping = True

    def on_batch(self, df, batch_id: int) -> None:
        with self.lock:
            if self.stopping:  # not run, so not committed: the next start runs it
                self.refused_batch = True
                raise SlotStopping(f"batch {batch_id} not run: the slot is stopping")
            self.mark("sink called")
            end = read_offset_log(self.paths.checkpoint, batch_id)
            start = (
                read_offset_log(self.paths.checkpoint, batch_id - 1) if batch_id > 0 else read_initial(self.paths.spool)
            )
            control, _ = self.follower.snapshot()
            table = None
            if is_active(control, self.slot) or "kind" in df.columns or self.image.collecting:
                table = batch_table(df)  # runs the batch: every read task has finished when it returns
            else:  # the standby's batch: its state moves, its output goes nowhere (see standby_batch)
                standby_batch(df)
            self.mark("batch read")
            control, _ = self.follower.snapshot()
            active = is_active(control, self.slot)
            if active:
                assert control is not None  # is_active
                self.emitter.acquire(control.epoch)
                if table is None and not self.emitter.already_emitted(end or {}, start):
                    # Run as the standby, and the role came meanwhile with this batch's output owed
                    # (never expected: a standby's batch ends within what the active emitted).
                    log.warning(
                        "batch %s ran as the standby and is owed as the active: run again with its output", batch_id
                    )
                    table = batch_table(df)
            if table is not None:
                out, dead = self.split(table, start, end or {})
                self.counters.dead_letters += len(dead)
            else:  # nothing to emit: the standby's batch, or one the active emitted already
                out, dead = [], []
                self.counters.dead_letters += len(collect(self.paths.spool, start or {}, end or {}))
            if self.image.collecting:  # every batch while collecting ran with its output (above)
                self.image.fold(batch_id, out)
            self.last_batch = batch_id
            if active:
                assert control is not None  # is_active
                try:
                    res = self.emitter.emit(batch_id, start or {}, end or {}, out, dead)
                except KafkaException as exc:
                    self.fenced_meanwhile(control.epoch, exc)
                    raise
                self.mark("emitted")
                if res.skipped:
                    self.counters.skipped_batches += 1
                else:
                    self.counters.emitted_batches += 1
                    if correction_due(control, self.slot, self.emitter):
                        self.emitted_keys.note(batch_id, out)  # what a correction read at an earlier batch leaves out
            elif self.emitter.holding:
                self.emitter.release()
            purge(self.paths.spool, end or {})
            if end:
                # A skipped batch (output emitted before: a replay, or a new active reaching its
                # handoff's fence) is not this slot's first batch as the active.
                wrote = active and not res.skipped
                self.follower.note_processed(
                    end, emitted_epoch=control.epoch if wrote and control is not None else None
                )

    def fenced_meanwhile(self, epoch: int, exc: Exception, wait_s: float = 10.0) -> None:
        """A commit that failed after the role moved on was fenced (the new active initialised the shared
        writer id first), whatever error it got: Tansu answers a commit it aborted that way with a closed
        connection (_TIMED_OUT), seen when this slot woke up from a stall it was failed over for. Raised as
        WriterFenced, so the slot goes on as the standby (Harness.rejoin_as_standby) instead of failing.

        The new epoch may not be known here yet: a taker fences the writer before it writes the control
        record (runtime.coordination.lease), and a slot waking from a stall has its follower read on from where it
        stopped. So the follower gets `wait_s` to see it (as in rejoin_as_standby) before the error is
        left to fail the query: seen in CI as a woken active that exited instead of rejoining."""
        deadline = time.monotonic() + wait_s
        while True:
            now, _ = self.follower.snapshot()
            if now is not None and now.epoch != epoch:
                self.emitter.release()
                raise WriterFenced(
                    f"{self.app.name}/{self.slot.value}: the commit at epoch {epoch} failed ({exc}) "
                    f"after epoch {now.epoch} began: fenced"
                ) from exc
            if time.monotonic() >= deadline:
                return
            time.sleep(0.1)

    def split(self, table, start, end) -> tuple[list, list]:
        """The batch's output (key, value) pairs and dead letters (key, value, headers)."""
        topic = self.app.input.topic
        keys = table.column("key").to_pylist()
        values = table.column("value").to_pylist()
        if "kind" not in table.column_names:  # the source decoded: dead letters are in the spool
            dead = [
                (d.key, d.value, dead_headers(d.reason, topic, d.partition, d.offset))
                for d in collect(self.paths.spool, start or {}, end)
            ]
            return list(zip(keys, values)), dead
        kinds = table.column("kind").to_pylist()
        out = [(k, v) for kind, k, v in zip(kinds, keys, values) if kind == KIND_OUTPUT]
        dead = []
        if len(out) != len(kinds):
            reasons = table.column("reason").to_pylist()
            parts = table.column("src_partition").to_pylist()
            offs = table.column("src_offset").to_pylist()
            for kind, k, v, r, p, o in zip(kinds, keys, values, reasons, parts, offs):
                if kind == KIND_DEAD:
                    dead.append((k, v, dead_headers(r, topic, p, o)))
        return out, dead
