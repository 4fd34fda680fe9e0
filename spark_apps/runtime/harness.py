"""The app harness: every Baton app runs inside it.

It reads the app definition, builds one streaming query per slot (Baton source, which decodes the
events, -> the app's stateful transform; see build_frame), and in foreachBatch emits the output and
the dead letters exactly once when this slot holds the active role, or nothing when it is the standby.
It follows the control topic without a restart, publishes a status record per batch, and stops
at a batch boundary on request (control record or SIGTERM).

An app module provides:
    VALUE_SCHEMA: str                 Spark DDL of the JSON events
    REQUIRED: tuple[str, ...]         fields that must be present (else dead letter)
    transform(events) -> DataFrame    stateful; columns `key` and `value` (strings)
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import re
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import ModuleType

from confluent_kafka import KafkaException, Producer

from baton.apps import AppDefinition
from baton.generations import slot_paths
from baton.handoff import taken_over_at
from baton.health import HealthPolicy
from baton.records import Positions, Role, Slot, SlotState, StateDigest, StatusRecord, covers
from baton.settings import STATUS_TOPIC
from spark_apps.runtime.batch_times import latencies_ms, read_batch_times
from spark_apps.runtime.correction import EmittedKeys, leave_out
from spark_apps.runtime.dead_letters import collect, purge, read_initial
from spark_apps.runtime.decode import INVALID_PREFIX, NOT_AN_OBJECT, supported
from spark_apps.runtime.follower import Follower
from spark_apps.runtime.input_ends import InputEnds
from spark_apps.runtime.hold import Hold
from spark_apps.runtime.kafka_sink import TransactionalEmitter, WriterFenced
from spark_apps.runtime.lease import LeaseKeeper
from spark_apps.runtime.spark import background_jobs
from spark_apps.runtime.state_check import digest_state, state_output
from baton.checkpoints import committed_batches, last_committed_batch, state_operators
from baton.kafka.client_config import kafka_config

log = logging.getLogger(__name__)

KIND_OUTPUT, KIND_DEAD = "o", "d"
CORRUPT = "_baton_corrupt"  # from_json's corrupt-record column (the path where Spark parses events)
IDLE_HEARTBEAT_S = 5.0
# How long a stopping slot waits for its last committed batch's progress event (Spark's listener bus
# delivers it just after the commit) before it digests its state instead (Harness.note_left).
LEFT_PROGRESS_WAIT_S = 2.0
# The query's trigger ticks this often; the app's trigger_ms paces its batches in the source
# (kafka_source.BatchPacer), where a moved cap starts a batch on the next tick instead of at the
# next multiple of trigger_ms (a handoff's critical path crossed two such waits).
TRIGGER_TICK_MS = 100
# Inside the checkpoint (a copy of it carries it): the id of the input topic its positions belong to.
IDENTITY_FILE = "baton-input.json"


def _is_active(control, slot: Slot) -> bool:
    return control is not None and control.role_of(slot) is Role.ACTIVE


def standby_batch(df) -> None:
    """Run a standby's batch for its state alone: the noop sink consumes the rows in the JVM. Collecting
    them as Arrow (what the active does, to emit them) cost the standby a conversion and a copy of every
    output row into Python, only to drop them."""
    df.write.format("noop").mode("overwrite").save()


def read_offset_log(checkpoint: Path, batch_id: int) -> Positions | None:
    """End positions of `batch_id` from Spark's offset log (written before the batch runs)."""
    try:
        lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    except FileNotFoundError:
        return None
    # Line 0 is the log version, line 1 the batch metadata, then one line per source.
    return {int(k): int(v) for k, v in json.loads(lines[2]).items()}


def batch_ending_at(checkpoint: Path, position: Positions, look_back: int = 500) -> tuple[int | None, bool]:
    """(the committed batch that ended at exactly `position`, or None; whether the slot is past it).
    Only the newest `look_back` batches are looked at: a check asks for a recent position."""
    want = {p: o for p, o in position.items()}
    batches = committed_batches(checkpoint)
    for batch in reversed(batches[-look_back:]):
        end = read_offset_log(checkpoint, batch)
        if end is None:
            continue
        if end == want:
            return batch, True
        if not covers(end, want):  # older batches end before it
            break
    last = read_offset_log(checkpoint, batches[-1]) if batches else None
    return None, last is not None and covers(last, want)


@dataclass
class Counters:
    started: float = field(default_factory=time.monotonic)
    first_batch_ms: int | None = None
    # Where a start-up's time goes, (phase, seconds since `started`), logged with the first batch.
    startup: list[tuple[str, float]] = field(default_factory=list)
    dead_letters: int = 0
    emitted_batches: int = 0
    skipped_batches: int = 0


class SlotStopping(RuntimeError):
    """A batch that would start after the slot began stopping: raised instead of running it."""


class Harness:
    def __init__(self, app: AppDefinition, slot: Slot, bootstrap: str, state_dir: Path, generation: int = 0,
                 spark_conf: dict[str, str] | None = None, starting_offsets: str = "earliest",
                 hold: Hold | None = None):
        self.app, self.slot, self.bootstrap, self.generation = app, slot, bootstrap, generation
        self.hold = hold  # a staged launch: start up, then wait to be the slot's launch (runtime.hold)
        self.state_dir = state_dir
        self.paths = slot_paths(state_dir, app.name, slot, generation)
        self.spark_conf = spark_conf or {}
        self.starting_offsets = starting_offsets
        self.follower = Follower(bootstrap, app.name, slot, app.commits_topic, app.input.partitions, self.paths.cap_file,
                                 standby_pace_s=app.standby_pace_ms / 1000)
        self.emitter = TransactionalEmitter(bootstrap, app.name, slot, generation, app.output.topic,
                                            app.dead_letter_topic, app.commits_topic)
        self.status_producer = Producer(kafka_config(bootstrap, {"linger.ms": 20}))
        self.input_ends = InputEnds(bootstrap, app.input.topic, app.input.partitions)  # lag in each status record
        self.counters = Counters()
        self.state = SlotState.STARTING
        self._stop = threading.Event()
        self._batch_lock = threading.Lock()
        self._stopping = False  # set under the batch lock: no batch runs after it
        self._refused_batch = False  # a batch was refused because the slot was stopping
        self.query = None
        self.spark = None
        self.last_progress: dict | None = None  # the last batch's progress, repeated by idle heartbeats
        self.last_batch_ms: int | None = None  # when the last batch with input started (its input rate)
        self.last_publish = 0.0
        self._latency_of: tuple[object, tuple[int | None, int | None]] = (None, (None, None))
        self.digest: StateDigest | None = None  # the last state digest taken (restore, check or stop)
        self.active_digest: StateDigest | None = None  # the active's state at a check, digested here
        self.restored_batch: int | None = None  # the last committed batch at start: what the query restores
        self.restore_digested = False
        self._checked: Positions | None = None  # the check_at position digested (or found passed) last
        self._checked_active: Positions | None = None  # the same, for the active's state
        self.emitted_keys = EmittedKeys()  # while a correction is due
        self.lease: LeaseKeeper | None = None  # renews this slot's lease; the standby's failover (runtime.lease)
        self.last_event = time.monotonic()  # the query's last progress or idle event
        # A query silent this long (no batch, no idle event) is hung: the lease is no longer renewed.
        self.stall_s = HealthPolicy.from_app(app).heartbeat_max_age_s

    # --- status -------------------------------------------------------------------------------
    def publish(self, progress: dict | None = None, error: str = "") -> None:
        control, marker = self.follower.snapshot()
        role = control.role_of(self.slot) if control else Role.STANDBY
        st = _status_from_progress(progress) if progress else {}
        if progress:
            st["latency_ms"], st["latency_newest_ms"] = self._latencies(progress)
        if st.get("input_end") is None:
            st["input_end"] = self.input_ends.latest()
        rec = StatusRecord(
            app=self.app.name, slot=self.slot, state=self.state, role=role,
            epoch_seen=control.epoch if control else 0, version=self.app.version, generation=self.generation,
            emitted=dict(marker.emitted) if marker else None, dead_letters=self.counters.dead_letters,
            restore_ms=self.counters.first_batch_ms, state_digest=self.digest, active_digest=self.active_digest,
            corrected_epoch=self.emitter.last.corrected_epoch if self.emitter.last is not None else 0,
            error=error, pid=os.getpid(),
            host=socket.gethostname(), ts_ms=int(time.time() * 1000), **st,
        )
        self.status_producer.produce(STATUS_TOPIC, rec.to_bytes(), rec.key())
        self.status_producer.poll(0)
        self.last_publish = time.monotonic()

    def _latencies(self, progress: dict) -> tuple[int | None, int | None]:
        """The batch's end-to-end latencies, read once per batch (idle heartbeats repeat its progress)."""
        if self._latency_of[0] != progress.get("batchId"):
            self._latency_of = (progress.get("batchId"), batch_latencies(progress, self.paths.batch_times))
        return self._latency_of[1]

    def alive(self) -> bool:
        """Starting up, or the query reported a batch or idleness within stall_s (its lease holds)."""
        return self.state in (SlotState.STARTING, SlotState.RESTORING) or time.monotonic() - self.last_event < self.stall_s

    def mark(self, phase: str) -> None:
        """A start-up phase ended (until the first batch is done; the log line says where time went)."""
        c = self.counters
        if c.first_batch_ms is None:
            c.startup.append((phase, time.monotonic() - c.started))

    def log_startup(self, progress: dict) -> None:
        marks = ", ".join(f"{phase} {t:.1f}s" for phase, t in self.counters.startup)
        spark = ", ".join(f"{k} {v / 1000:.1f}s" for k, v in sorted((progress.get("durationMs") or {}).items(),
                                                                   key=lambda kv: -kv[1]) if v >= 50)
        log.info("start-up (since the harness began): %s; first batch %s: %s", marks, progress.get("batchId"), spark)

    # --- the batch ----------------------------------------------------------------------------
    def on_batch(self, df, batch_id: int) -> None:
        with self._batch_lock:
            if self._stopping:  # not run, so not committed: the next start runs it
                self._refused_batch = True
                raise SlotStopping(f"batch {batch_id} not run: the slot is stopping")
            self.mark("sink called")
            end = read_offset_log(self.paths.checkpoint, batch_id)
            start = (read_offset_log(self.paths.checkpoint, batch_id - 1) if batch_id > 0
                     else read_initial(self.paths.spool))
            control, _ = self.follower.snapshot()
            table = None
            if _is_active(control, self.slot) or "kind" in df.columns:
                table = df.toArrow()  # runs the batch: every read task has finished when it returns
            else:  # the standby's batch: its state moves, its output goes nowhere (see standby_batch)
                standby_batch(df)
            self.mark("batch read")
            control, _ = self.follower.snapshot()
            active = _is_active(control, self.slot)
            if active:
                self.emitter.acquire(control.epoch)
                if table is None and not self.emitter.already_emitted(end or {}, start):
                    # Run as the standby, and the role came meanwhile with this batch's output owed
                    # (never expected: a standby's batch ends within what the active emitted).
                    log.warning("batch %s ran as the standby and is owed as the active: run again with its output",
                                batch_id)
                    table = df.toArrow()
            if table is not None:
                out, dead = self.split(table, start, end or {})
                self.counters.dead_letters += len(dead)
            else:  # nothing to emit: the standby's batch, or one the active emitted already
                out, dead = [], []
                self.counters.dead_letters += len(collect(self.paths.spool, start or {}, end or {}))
            if active:
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
                    if self.correction_due(control):  # what a correction read at an earlier batch leaves out
                        self.emitted_keys.note(batch_id, out)
            elif self.emitter.holding:
                self.emitter.release()
            purge(self.paths.spool, end or {})
            if end:
                # A skipped batch (output emitted before: a replay, or a new active reaching its
                # handoff's fence) is not this slot's first batch as the active.
                wrote = active and not res.skipped
                self.follower.note_processed(end, emitted_epoch=control.epoch if wrote else None)

    def fenced_meanwhile(self, epoch: int, exc: Exception, wait_s: float = 10.0) -> None:
        """A commit that failed after the role moved on was fenced (the new active initialised the shared
        writer id first), whatever error it got: Tansu answers a commit it aborted that way with a closed
        connection (_TIMED_OUT), seen when this slot woke up from a stall it was failed over for. Raised as
        WriterFenced, so the slot goes on as the standby (rejoin_as_standby) instead of failing.

        The new epoch may not be known here yet: a taker fences the writer before it writes the control
        record (runtime.lease), and a slot waking from a stall has its follower read on from where it
        stopped. So the follower gets `wait_s` to see it (as in rejoin_as_standby) before the error is
        left to fail the query: seen in CI as a woken active that exited instead of rejoining."""
        deadline = time.monotonic() + wait_s
        while True:
            now, _ = self.follower.snapshot()
            if now is not None and now.epoch != epoch:
                self.emitter.release()
                raise WriterFenced(f"{self.app.name}/{self.slot.value}: the commit at epoch {epoch} failed ({exc}) "
                                   f"after epoch {now.epoch} began: fenced") from exc
            if time.monotonic() >= deadline:
                return
            time.sleep(0.1)

    def split(self, table, start, end) -> tuple[list, list]:
        """The batch's output (key, value) pairs and dead letters (key, value, headers)."""
        topic = self.app.input.topic
        keys = table.column("key").to_pylist()
        values = table.column("value").to_pylist()
        if "kind" not in table.column_names:  # the source decoded: dead letters are in the spool
            dead = [(d.key, d.value, _dead_headers(d.reason, topic, d.partition, d.offset))
                    for d in collect(self.paths.spool, start or {}, end)]
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
                    dead.append((k, v, _dead_headers(r, topic, p, o)))
        return out, dead

    # --- the query ----------------------------------------------------------------------------
    def build_query(self, frame=None):
        return ((frame if frame is not None else self.build_frame()).writeStream.outputMode("update")
                .foreachBatch(self.on_batch)
                .option("checkpointLocation", str(self.paths.checkpoint))
                .trigger(processingTime=f"{min(self.app.trigger_ms, TRIGGER_TICK_MS)} milliseconds"))

    def build_frame(self):
        """The streaming frame the sink sees: the app's output rows and the dead letters, by `kind`."""
        from spark_apps.runtime.spark import session

        self.spark = session(f"baton-{self.app.name}-{self.slot.value}", self.app, self.spark_conf)
        self.mark("spark session")
        return build_frame(self.spark, self.app, self.bootstrap, self.starting_offsets, self.paths.cap_file,
                           self.paths.spool, min_batch_interval_ms=self.app.trigger_ms,
                           identity_file=self.paths.checkpoint / IDENTITY_FILE, batch_times_file=self.paths.batch_times)

    # --- corrected output (spark_apps.runtime.correction) ---------------------------------------
    def correction_due(self, control) -> bool:
        """This slot is the active at an epoch that asked for corrected output, and (as far as its writer
        knows: it may not hold it yet) the output does not hold it."""
        if control is None or control.role_of(self.slot) is not Role.ACTIVE or control.correct_epoch != control.epoch:
            return False
        return not (self.emitter.holding and self.emitter.epoch == control.epoch and self.emitter.corrected)

    def maybe_correct(self) -> None:
        """Publish the corrected output once this slot's last committed batch K stands at or past the
        fence it took over at: K's state read behind the query's batches, then, under the batch lock,
        published less the keys emitted after K."""
        control, _ = self.follower.snapshot()
        if self.spark is None or not self.correction_due(control):
            return
        started = time.monotonic()
        try:
            with self._batch_lock:  # no sink runs: K and the last marker stand still
                self.emitter.acquire(control.epoch)
                if self.emitter.corrected:  # published before a restart
                    self.emitted_keys.clear()
                    return
                batch = last_committed_batch(self.paths.checkpoint)
                at = (read_offset_log(self.paths.checkpoint, batch) if batch is not None else None) or {}
                if not covers(at, taken_over_at(control, self.slot) or {}):
                    return  # still on its way to F
                last = self.emitter.last
                if last is not None and not covers(at, last.emitted) and not self.emitted_keys.noted(last.batch_id):
                    # Output a previous start of this slot emitted and Spark did not commit (it runs that
                    # batch again, skipping its output): neither in K's state nor noted. After its commit.
                    return
            module = importlib.import_module(self.app.module)
            with background_jobs(self.spark):
                rows = state_output(self.spark, self.paths.checkpoint, batch, module) if batch is not None else []
            read_s = time.monotonic() - started
            with self._batch_lock:
                now, _ = self.follower.snapshot()
                if self._stopping or now is None or now.epoch != control.epoch or not self.correction_due(now):
                    return
                published = leave_out(rows, self.emitted_keys.after(batch))
                locked = time.monotonic()
                self.emitter.emit_correction(published)
                self.emitted_keys.clear()
                publish_s = time.monotonic() - locked
        except WriterFenced as exc:  # the role moved on meanwhile: the new writer's to do
            log.error("corrected output not published: %s", exc)
            return
        log.info("published the state at batch %s as corrected output at epoch %s: %d of %d keys (the rest emitted "
                 "since) in %.1fs (state read %.1fs, published under the batch lock in %.1fs)", batch, control.epoch,
                 len(published), len(rows), time.monotonic() - started, read_s, publish_s)

    # --- state digests (spark_apps.runtime.state_check) -----------------------------------------
    def take_digest(self, batch_id: int | None, at: str, position: Positions | None = None) -> None:
        """Digest the committed state after `batch_id` and publish it; None = nothing committed yet
        (the empty state). A failure is logged, never fatal: the gates waiting for it time out."""
        digest = self.digest_checkpoint(self.paths.checkpoint, batch_id, at, position)
        if digest is not None:
            self.digest = digest
            self.publish(self.last_progress)

    def digest_checkpoint(self, checkpoint: Path, batch_id: int | None, at: str,
                          position: Positions | None = None) -> StateDigest | None:
        """The digest of `checkpoint`'s committed state after `batch_id` (None: the empty state), or
        None if it could not be taken (logged)."""
        started = time.monotonic()
        try:
            if batch_id is None:
                digest = StateDigest(at=at, batch_id=-1, rows=0, digest="0" * 16, schema="",
                                     ts_ms=int(time.time() * 1000))
            else:
                with background_jobs(self.spark):  # behind the query's batches
                    digest = digest_state(self.spark, checkpoint, batch_id, at, live=live_rows(self.app, at))
            if position is not None:
                digest = dataclasses.replace(digest, position=dict(position))
        except Exception as exc:  # noqa: BLE001 - a digest is evidence for a gate, not the slot's job
            log.error("state digest (%s, batch %s of %s) failed: %s", at, batch_id, checkpoint, exc)
            return None
        log.info("state digest (%s, batch %s of %s): %d rows in %.1fs", at, batch_id, checkpoint, digest.rows,
                 time.monotonic() - started)
        return digest

    def note_left(self) -> None:
        """What this stopped slot leaves for its next start (the restore check compares against it):
        its last committed batch and the state rows its query counted there, off that batch's progress
        event, without a digest job: a stop digest took 3.3-4.4 s at 100k keys in the product-path
        bench, all of it downtime of an upgrade's restart (more input to catch up on after it). A query
        with other than one stateful operator, or whose committed batch's progress event does not come,
        is digested as before."""
        batch = last_committed_batch(self.paths.checkpoint)
        deadline = time.monotonic() + LEFT_PROGRESS_WAIT_S
        while batch is not None:  # the listener may deliver the last batch's event just after its commit
            progress = self.last_progress or {}
            if int(progress.get("batchId", -1)) == batch:
                ops = progress.get("stateOperators") or []
                if len(ops) == 1 and len(state_operators(self.paths.checkpoint)) == 1:
                    self.digest = StateDigest(at="stop", batch_id=batch, rows=int(ops[0].get("numRowsTotal", 0)),
                                              digest="", schema="", ts_ms=int(time.time() * 1000))
                    self.publish(self.last_progress)
                    return
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        self.take_digest(batch, "stop")

    def digest_at_check(self) -> None:
        """Asked for a state check at a position (ControlRecord.check_at), the standby digests, once
        each, the active's state and its own after the committed batch that ended exactly there, while
        both queries run on (the output does not wait for it). The active digests nothing: the digest's
        Spark job would hold one of its two task slots for seconds (5.8 s at 100k keys in the rolling
        upgrade bench, its batches on one slot meanwhile: a 4 s output gap); the standby reads the
        active's checkpoint instead (committed files, written whole), where the active itself would
        restore from. A slot not there yet looks again; one that passed it within a batch never can: a
        "missed" digest says so in the status, and the gate waiting for it fails at once."""
        control, _ = self.follower.snapshot()
        if control is None or control.check_at is None or control.active is self.slot:
            return
        target = dict(control.check_at)
        # The active's first: it reaches the position within seconds of being asked, while this slot
        # may still be catching up (a restarted standby), and its checkpoint keeps a batch's files
        # only for min_batches_to_retain batches.
        spec = control.slots.get(control.active)
        if self._checked_active != target and spec is not None:
            active = slot_paths(self.state_dir, self.app.name, control.active, spec.generation).checkpoint
            reached, digest = self.check_digest(active, target)
            if reached:
                self._checked_active = target
            if digest is not None:
                self.active_digest = digest
                self.publish(self.last_progress)
        if self._checked != target:
            reached, digest = self.check_digest(self.paths.checkpoint, target)
            if reached:
                self._checked = target
            if digest is not None:
                self.digest = digest
                self.publish(self.last_progress)

    def check_digest(self, checkpoint: Path, target: Positions) -> tuple[bool, StateDigest | None]:
        """(whether `checkpoint`'s query reached the check position `target`, the digest of its state
        there: "check", or "missed" when it read past it within a batch). Not reached: look again. A
        digest that failed is None (logged; the gate waiting for it times out and a retry asks anew)."""
        batch, passed = batch_ending_at(checkpoint, target)
        if batch is not None:
            return True, self.digest_checkpoint(checkpoint, batch, "check", position=target)
        if passed:
            log.warning("no committed batch of %s ends at %s: no state digest there", checkpoint, target)
            return True, StateDigest(at="missed", batch_id=-1, rows=0, digest="", schema="",
                                     ts_ms=int(time.time() * 1000), position=target)
        return False, None

    def request_stop(self, *_args) -> None:
        self._stop.set()

    def stop_query(self) -> None:
        """Stop at a batch boundary: a running batch's sink finishes first (the lock), a batch that
        starts after that does not run (on_batch). The lock is not held while Spark stops the query:
        Spark waits for its batch thread, which may be about to enter on_batch; holding the lock there
        deadlocked a graceful stop until the process was killed (seen in the rolling upgrade bench)."""
        with self._batch_lock:
            self._stopping = True
        self.query.stop()

    def start_up_staged(self):
        """A staged launch's start-up beside the running slot: the Spark session and the frame (neither
        reads the checkpoint or a topic). Returns the frame, or None after an error: the launch still
        holds, then builds it again as its own and reports the error as the slot's (FAILED)."""
        try:
            return self.build_frame()
        except Exception as exc:
            log.warning("staged start-up failed (%s: %s); it is reported once this launch is the slot's",
                        type(exc).__name__, exc)
            return None

    def run(self) -> int:
        """Run until stopped; returns a process exit code."""
        signal.signal(signal.SIGTERM, self.request_stop)
        frame = None
        if self.hold is not None:
            frame = self.start_up_staged()
            if not self.hold.wait(self._stop):
                self.follower.stop()
                return 0 if self._stop.is_set() else 3
            self.mark("promoted")
        self.paths.root.mkdir(parents=True, exist_ok=True)  # after a hold: a restart may archive or copy it
        self.publish()
        try:
            # Where the restored query stands: a state check position it passed before this start
            # must not cap it (compute_cap).
            last = last_committed_batch(self.paths.checkpoint)
            if last is not None and (end := read_offset_log(self.paths.checkpoint, last)):
                self.follower.note_processed(end)
            self.follower.catch_up()
            self.mark("control read")
            # A check asked before this start is not this process's to answer (its gate asked the
            # slots running then; a retry asks again): no digest job at every later restart.
            control, _ = self.follower.snapshot()
            self._checked = self._checked_active = control.check_at if control is not None else None
            self.follower.start()
            self.input_ends.start()
            self.lease = LeaseKeeper(self.app, self.slot, self.bootstrap, self.follower, lambda: self.state, self.alive)
            self.lease.start()
            writer = self.build_query(frame)
            self.mark("query built")
            add_progress_listener(self.spark, self)
            self.state = SlotState.RESTORING
            self.publish()
            self.restored_batch = last_committed_batch(self.paths.checkpoint)
            self.query = writer.start()
            self.mark("query started")
        except Exception as exc:  # bad app code or settings: say why in the status topic, exit non-zero
            self.state = SlotState.FAILED
            self.publish(error=f"{type(exc).__name__}: {exc}"[:2000])
            self.status_producer.flush(5)
            if self.lease is not None:
                self.lease.stop()
            self.input_ends.stop()
            self.follower.stop()
            raise
        code = 0
        try:
            while not self._stop.is_set():
                try:
                    ended = self.query.awaitTermination(0.5)
                except Exception:  # it failed: said below, unless this slot was fenced and goes on as the standby
                    ended = True
                if ended:
                    if self.rejoin_as_standby(writer):
                        continue
                    break  # the query ended by itself: an error, reported below
                control, _ = self.follower.snapshot()
                spec = control.slots.get(self.slot) if control else None
                if spec is not None and spec.desired in (SlotState.STOPPED, SlotState.STOPPING, SlotState.FAILED):
                    break
                if not self.restore_digested and self.state is SlotState.RUNNING:
                    # What the query restored (the restore check), digested once it runs (a first batch
                    # or idle), so the digest's Spark job is not on the restart's critical path.
                    self.restore_digested = True
                    self.take_digest(self.restored_batch, "restore")
                self.digest_at_check()
                self.maybe_correct()
            if self.query.isActive or self.query.exception() is None:  # a stop, not a failed query
                self.state = SlotState.STOPPING
                self.publish()
                self.stop_query()
                self.note_left()
                self.state = SlotState.STOPPED
        except Exception as exc:  # the query failed: report it, exit non-zero
            self.state = SlotState.FAILED
            self.publish(error=f"{type(exc).__name__}: {exc}"[:2000])
            code = 1
        finally:
            exc = self.query.exception() if self.query is not None else None
            # A batch refused while stopping ends the query with that error: a clean stop all the same.
            if exc is not None and not isinstance(exc, WriterFenced) and not self._refused_batch:
                self.state, code = SlotState.FAILED, 1
                reason = failure_reason(str(exc))
                log.error("the query failed: %s", reason)
                self.publish(error=reason)
            else:
                self.publish()
            self.status_producer.flush(5)
            if self.lease is not None:
                self.lease.stop()  # its last renewal carries the final state: a stop releases the lease
            self.input_ends.stop()
            self.follower.stop()
            self.emitter.release()
        return code

    def rejoin_as_standby(self, writer, wait_s: float = 10.0) -> bool:
        """The query failed because another slot fenced this one's writer: it took the active role while
        this slot was stalled (runtime.lease). Restart the query from the checkpoint as the standby, in
        this process: the failed batch was not committed, so it runs again, capped as a standby batch."""
        exc = self.query.exception()
        if exc is None or WriterFenced.__name__ not in str(exc):
            return False
        deadline = time.monotonic() + wait_s  # the follower reads the record that moved the role
        while self.follower.role() is Role.ACTIVE and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.follower.role() is Role.ACTIVE:
            return False
        self.emitter.release()
        log.warning("this slot's writer was fenced (another slot took the active role): rejoining as the standby")
        self.query = writer.start()
        return True


def app_transform(mod: ModuleType, app: AppDefinition, events):
    """The app module's transform; an app with a state TTL gets it (transform(events, ttl))."""
    return mod.transform(events) if app.state.ttl is None else mod.transform(events, ttl=app.state.ttl)


def live_rows(app: AppDefinition, at: str):
    """What a digest of this app's state taken `at` compares (state_check.digest_state): all of it, or,
    for a check of an app with a state TTL, the rows alive at the check's position (its module's
    state_live). A check compares two slots, which drop idle keys at other batches; a stop and its
    restore compare one checkpoint with itself, every row (the stop's figure is its query's row count,
    dropped keys not yet removed included)."""
    if app.state.ttl is None or at != "check":
        return None
    mod = importlib.import_module(app.module)
    if not hasattr(mod, "state_live"):
        raise ValueError(f"{app.module} has state.ttl but no state_live(state, ttl): its slots' digests could not agree")
    return lambda state: mod.state_live(state, app.state.ttl)


def build_frame(spark, app: AppDefinition, bootstrap: str, starting_offsets: str, cap_file: Path, spool: Path,
                min_batch_interval_ms: int = 0, identity_file: Path | None = None,
                batch_times_file: Path | None = None):
    """The streaming frame the sink sees. `cap_file` bounds how far the source reads
    (spark_apps.runtime.follower); `min_batch_interval_ms`, when above the tick, paces the batches in
    the source (the query then runs on TRIGGER_TICK_MS). The app's on_data_loss says what a restart does
    when its checkpoint's positions are not in the input any more (input_check.py); `identity_file`
    (inside the checkpoint) records which topic they belong to.

    When every field of the app's VALUE_SCHEMA is of a type the source decodes (decode.TYPES), the
    source decodes the events and the frame is the app's output, (key, value); the dead letters go
    to `spool` (dead_letters.py). Otherwise Spark parses them (from_json) and the frame is the output
    unioned with the dead letters, by `kind` (the input is then scanned twice: once a branch)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DataType

    from spark_apps.runtime.kafka_source import KafkaSource

    # Imported here, inside run()'s error handling: an app module that fails to import is reported
    # as FAILED with the error in the status topic like any other bad app code.
    mod: ModuleType = importlib.import_module(app.module)
    spark.dataSource.register(KafkaSource)
    reader = (spark.readStream.format("baton-kafka")
              .option("bootstrap.servers", bootstrap)
              .option("topic", app.input.topic)
              .option("startingOffsets", starting_offsets)
              .option("maxRecordsPerTrigger", str(app.max_records_per_trigger))
              .option("capFile", str(cap_file))
              .option("onDataLoss", app.on_data_loss)
              .option("readOn", "driver"))
    if identity_file is not None:
        reader = reader.option("identityFile", str(identity_file))
    if batch_times_file is not None:
        reader = reader.option("batchTimesFile", str(batch_times_file))
    if min_batch_interval_ms > TRIGGER_TICK_MS:
        reader = reader.option("minBatchIntervalMs", str(min_batch_interval_ms))
    fields = decodable_fields(mod.VALUE_SCHEMA)
    if fields is not None:
        events = (reader.option("valueFields", json.dumps(fields))
                  .option("requiredFields", json.dumps(list(mod.REQUIRED)))
                  .option("deadLetterDir", str(spool)).load())
        return app_transform(mod, app, events).select(F.col("key").cast("binary").alias("key"),
                                            F.col("value").cast("binary").alias("value"))
    raw = reader.load()
    # A value that is not JSON parses to a row of nulls; Spark's corrupt-record column tells it apart.
    names = [f.name for f in DataType.fromDDL(mod.VALUE_SCHEMA).fields]
    parsed = raw.select(
        "key", "value", "partition", "offset",
        F.from_json(F.col("value").cast("string"), f"{mod.VALUE_SCHEMA}, {CORRUPT} STRING",
                    {"columnNameOfCorruptRecord": CORRUPT}).alias("e"),
    )
    missing = [F.when(F.col(f"e.{f}").isNull(), F.lit(f)) for f in mod.REQUIRED]
    reason = F.when(F.col("e").isNull() | F.col(f"e.{CORRUPT}").isNotNull(), F.lit(NOT_AN_OBJECT)).otherwise(
        F.concat_ws(", ", *missing))
    parsed = parsed.withColumn("reason", reason)
    # Parse each event once per branch. Without a barrier the optimizer pushes the `reason` filter
    # below this projection and inlines from_json into it: 4 parses per event per branch (measured
    # in the physical plan; JSON parsing was 58% of the JVM's CPU). A nondeterministic column that
    # both filters reference keeps the filters above the parse.
    parsed = parsed.withColumn("_barrier", F.spark_partition_id())
    good = parsed.where((F.col("reason") == "") & (F.col("_barrier") >= 0)).select(*[F.col(f"e.{n}") for n in names])
    out = app_transform(mod, app, good).select(
        F.lit(KIND_OUTPUT).alias("kind"),
        F.col("key").cast("binary").alias("key"), F.col("value").cast("binary").alias("value"),
        F.lit(None).cast("string").alias("reason"),
        F.lit(None).cast("int").alias("src_partition"), F.lit(None).cast("long").alias("src_offset"),
    )
    dead = parsed.where((F.col("reason") != "") & (F.col("_barrier") >= 0)).select(
        F.lit(KIND_DEAD).alias("kind"), F.col("key").cast("binary").alias("key"),
        F.col("value").cast("binary").alias("value"),
        F.when(F.col("reason") == NOT_AN_OBJECT, F.col("reason"))
         .otherwise(F.concat(F.lit(INVALID_PREFIX), F.col("reason"))).alias("reason"),
        F.col("partition").cast("int").alias("src_partition"), F.col("offset").cast("long").alias("src_offset"),
    )
    return out.unionByName(dead)


def failure_reason(text: str, limit: int = 2000) -> str:
    """The error a failed query reports in its status. Spark buries a Python error under its error class,
    the traceback and the JVM's stack: the source's own message when it says why (input data loss: topic,
    partitions, positions and the way out); else a Python error's own line first, then Spark's words
    before its traceback; else Spark's text as it is."""
    m = re.search(r"InputDataLoss: ([^\n]+)", text)
    if m:
        return m.group(1).strip()[:limit]
    m = re.search(r"Traceback \(most recent call last\):\n(?:[ \t][^\n]*\n|\n)*(\S[^\n]*)", text)
    if m:
        head = " ".join(text[:m.start()].split())
        return (f"{m.group(1).strip()} ({head})" if head else m.group(1).strip())[:limit]
    return text[:limit]


def decodable_fields(ddl: str) -> list[tuple[str, str]] | None:
    """[(name, type)] of a VALUE_SCHEMA the source can decode itself, else None (Spark's DDL parser
    says what the types are, so both paths read the schema alike)."""
    from pyspark.sql.types import DataType, StructType

    schema = DataType.fromDDL(ddl)
    if not isinstance(schema, StructType):
        return None
    fields = [(f.name, f.dataType.simpleString()) for f in schema.fields]
    return fields if supported(fields) else None


def _dead_headers(reason: str, topic: str, partition: int, offset: int) -> list[tuple[str, bytes]]:
    return [("baton.reason", reason.encode()), ("baton.source", f"{topic}/{partition}/{offset}".encode())]


def trigger_started_ms(p: dict) -> int | None:
    """When the progress's trigger started (epoch ms), from its ISO timestamp."""
    try:
        return int(datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() * 1000)
    except (KeyError, TypeError, ValueError):
        return None


def with_input_rate(p: dict, previous_batch_ms: int | None) -> dict:
    """The progress with its input rate over the time since the previous batch's start. Spark divides
    by the time since the previous trigger, which need not have run a batch (a trigger that finds no
    new input, or one held by a cap): the rate would be overstated."""
    started = trigger_started_ms(p)
    rows = int(p.get("numInputRows", 0))
    if started is None or previous_batch_ms is None or rows <= 0 or started <= previous_batch_ms:
        return p
    return {**p, "inputRowsPerSecond": rows * 1000.0 / (started - previous_batch_ms)}


def _offsets(raw) -> dict[int, int] | None:
    # A source's offsets in a progress: JSON text (the Python data source) or already an object.
    if isinstance(raw, str):
        raw = json.loads(raw)
    return {int(k): int(v) for k, v in raw.items()} if raw else None


def batch_latencies(p: dict, batch_times: Path) -> tuple[int | None, int | None]:
    """(oldest, newest) input record's latency at the end of the progress's batch, from the times the
    reader left for it (spark_apps.runtime.batch_times); None, None when unknown."""
    end = _offsets((p.get("sources") or [{}])[0].get("endOffset"))
    started = trigger_started_ms(p)
    took = (p.get("durationMs") or {}).get("triggerExecution")
    if not end or not p.get("numInputRows") or started is None or took is None:
        return None, None
    return latencies_ms(read_batch_times(batch_times, end), started + int(took))


def _status_from_progress(p: dict) -> dict:
    ops = p.get("stateOperators") or [{}]
    sources = p.get("sources") or [{}]
    end, latest = (_offsets(sources[0].get(k)) for k in ("endOffset", "latestOffset"))
    return dict(
        batch_id=int(p.get("batchId", -1)),
        processed=end or {},
        input_end=latest,
        input_rows=int(p.get("numInputRows", 0)),
        input_rate=float(p.get("inputRowsPerSecond") or 0.0),
        processing_rate=float(p.get("processedRowsPerSecond") or 0.0),
        batch_ms=int((p.get("durationMs") or {}).get("triggerExecution", 0)),
        state_rows=int(ops[0].get("numRowsTotal", 0)),
        # RocksDB's files on disk when reported (the seed's disk budget), else the memory figure.
        state_bytes=int((ops[0].get("customMetrics") or {}).get("rocksdbSstFileSize") or ops[0].get("memoryUsedBytes", 0)),
        state_memory_bytes=int(ops[0].get("memoryUsedBytes", 0)),
    )


class _ProgressBridge:
    """The query's events, from the JVM through py4j, as JSON for the harness: two py4j calls an event.

    PySpark's own StreamingQueryListener converts each progress field by field (about a hundred py4j
    calls, answered on Spark's listener thread): measured ~90 ms of the JVM's CPU a batch, the
    biggest fixed cost of a batch after the tasks."""

    def __init__(self, harness: Harness):
        self.harness = harness

    def onQueryStarted(self, jevent):
        pass

    def onQueryProgress(self, jevent):
        h = self.harness
        c = h.counters
        h.last_event = time.monotonic()
        progress = json.loads(jevent.progress().json())
        h.last_progress = with_input_rate(progress, h.last_batch_ms)
        if int(progress.get("numInputRows", 0)) > 0:
            h.last_batch_ms = trigger_started_ms(progress)
        if c.first_batch_ms is None:
            h.mark("first batch done")
            c.first_batch_ms = int((time.monotonic() - c.started) * 1000)
            h.state = SlotState.RUNNING
            h.log_startup(h.last_progress)
        h.publish(h.last_progress)

    def onQueryIdle(self, jevent):
        # No new input (or the cap holds this slot back): the query is up and polling. Say so,
        # at most every IDLE_HEARTBEAT_S, so an idle slot is RUNNING and visibly alive.
        h = self.harness
        h.last_event = time.monotonic()
        if h.state is SlotState.RESTORING or time.monotonic() - h.last_publish >= IDLE_HEARTBEAT_S:
            h.state = SlotState.RUNNING
            h.publish(h.last_progress)

    def onQueryTerminated(self, jevent):
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def add_progress_listener(spark, harness: Harness) -> None:
    """Register the bridge as PySpark registers its listeners (a JVM wrapper around a py4j proxy)."""
    from pyspark.java_gateway import ensure_callback_server_started

    ensure_callback_server_started(spark.sparkContext._gateway)
    jvm = spark.sparkContext._jvm
    spark._jsparkSession.streams().addListener(
        jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(_ProgressBridge(harness)))
