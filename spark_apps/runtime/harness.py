"""The app harness: every Baton app runs inside it, one process per slot.

It builds the slot's streaming query (spark_apps.runtime.frame: Baton source -> the app's stateful
transform), whose sink emits the output exactly once while this slot holds the active role and nothing
while it is the standby (spark_apps.runtime.sink.batch_sink). It follows the control topic without a restart
(follower), renews its lease (lease), publishes a status record per batch and at least every
IDLE_HEARTBEAT_S (progress), digests its state for the upgrade's gates (digests), publishes corrected
output when asked (correction), and stops at a batch boundary on request (control record or SIGTERM:
the stop protocol below).

An app module provides:
    VALUE_SCHEMA: str                 Spark DDL of the JSON events
    REQUIRED: tuple[str, ...]         fields that must be present (else dead letter)
    transform(events) -> DataFrame    stateful; columns `key` and `value` (strings)
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
from confluent_kafka import Producer

from baton.apps import AppDefinition
from baton.checkpoints import last_committed_batch, read_offset_log
from baton.driver_wrapper import EXIT_CANNOT_RESUME
from baton.generations import slot_paths
from baton.health import CANNOT_RESUME, HealthPolicy
from baton.kafka.client_config import kafka_config
from baton.records import Role, Slot, SlotState, StatusRecord
from baton.settings import STATUS_TOPIC
from spark_apps.runtime.coordination.applied_cap import read_applied
from spark_apps.runtime.coordination.follower import Follower
from spark_apps.runtime.coordination.hold import Hold, SpareHold
from spark_apps.runtime.coordination.lease import LeaseKeeper
from spark_apps.runtime.coordination.priority import SlotPriority
from spark_apps.runtime.coordination.progress import add_progress_listener, failure_reason, status_from_progress
from spark_apps.runtime.coordination.relaunch import SUPERVISOR, Relaunch, record_restart, wanted_running
from spark_apps.runtime.frame import IDENTITY_FILE, TRIGGER_TICK_MS, build_frame, packs_rows
from spark_apps.runtime.sink.batch_sink import RoleGatedSink
from spark_apps.runtime.sink.corrected_output import CorrectedOutput
from spark_apps.runtime.sink.correction import EmittedKeys
from spark_apps.runtime.sink.kafka_sink import TransactionalEmitter, WriterFenced
from spark_apps.runtime.source.input_ends import InputEnds
from spark_apps.runtime.state.digests import StateDigests
from spark_apps.runtime.state.invariant_check import InvariantsOnRequest

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)


@dataclass
class StartUp:
    """Where a start-up's time goes: (phase, seconds since `started`), logged with the first batch."""

    started: float = field(default_factory=time.monotonic)
    # The process's start to the harness's (the interpreter, pyspark's and the runtime's imports).
    imports_s: float = field(default_factory=lambda: max(0.0, time.time() - psutil.Process().create_time()))
    first_batch_ms: int | None = None
    phases: list[tuple[str, float]] = field(default_factory=list)


class Harness:
    def __init__(
        self,
        app: AppDefinition,
        slot: Slot,
        bootstrap: str,
        state_dir: Path,
        generation: int = 0,
        spark_conf: dict[str, str] | None = None,
        starting_offsets: str = "earliest",
        hold: Hold | None = None,
        spare: SpareHold | None = None,
    ):
        self.app, self.slot, self.bootstrap, self.generation = app, slot, bootstrap, generation
        self.relaunch = Relaunch.from_env()  # restarted by its wrapper after the previous driver died
        self.spare = spare  # a spare driver: start up, then hold until it replaces a dead one
        self.hold = hold  # a staged launch: start up, then wait to be the slot's launch (runtime.coordination.hold)
        self.paths = slot_paths(state_dir, app.name, slot, generation)
        self.spark_conf = spark_conf or {}
        self.starting_offsets = starting_offsets
        self.follower = Follower(
            bootstrap,
            app.name,
            slot,
            app.commits_topic,
            app.input.partitions,
            self.paths.cap_file,
            standby_pace_s=app.standby_pace_ms / 1000,
        )
        self.emitter = TransactionalEmitter(
            bootstrap, app.name, slot, generation, app.output.topic, app.dead_letter_topic, app.commits_topic
        )
        self.status_producer = Producer(kafka_config(bootstrap, {"linger.ms": 20}))
        self.input_ends = InputEnds(bootstrap, app.input.topic, app.input.partitions)  # lag in each status record
        self.startup = StartUp()
        self.priority = SlotPriority(app.standby_nice)  # the standby yields the CPU to the active
        self.sink = RoleGatedSink(app, slot, self.paths, self.follower, self.emitter, EmittedKeys(), self.mark)
        self.corrected_output = CorrectedOutput(self.sink)
        self.invariants = InvariantsOnRequest(
            app,
            slot,
            self.paths.checkpoint,
            self.follower,
            spark=lambda: self.spark,
            publish=lambda: self.publish(self.last_progress),
            sink=self.sink,
        )
        self.digests = StateDigests(
            app,
            slot,
            state_dir,
            self.paths,
            self.follower,
            spark=lambda: self.spark,
            publish=lambda: self.publish(self.last_progress),
            last_progress=lambda: self.last_progress,
        )
        self.state = SlotState.STARTING
        self._stop = threading.Event()
        self.query: StreamingQuery | None = None
        self.spark = None
        self.last_progress: dict | None = None  # the last batch's progress, repeated by idle heartbeats
        self.last_batch_ms: int | None = None  # when the last batch with input started (its input rate)
        self.last_publish = 0.0
        self.published_hold: tuple[str, dict[int, int]] | None = None  # the fence the last status said it holds at
        # The last batch's end-to-end latencies (oldest, newest record), set with last_progress (ProgressBridge).
        self.latencies: tuple[int | None, int | None] = (None, None)
        self.packs_rows = False  # the source packs events many to a row: Spark's row counts are not events
        # Renews this slot's lease; the standby's failover (runtime.coordination.lease).
        self.lease: LeaseKeeper | None = None
        self.last_event = time.monotonic()  # the query's last progress or idle event
        # A query silent this long (no batch, no idle event) is hung: the lease is no longer renewed.
        self.stall_s = HealthPolicy.from_app(app).heartbeat_max_age_s

    # --- status -------------------------------------------------------------------------------
    def publish(self, progress: dict | None = None, error: str = "") -> None:
        control, marker = self.follower.snapshot()
        role = control.role_of(self.slot) if control else Role.STANDBY
        st = status_from_progress(progress, rows_counted=self.app.state.count_rows) if progress else {}
        if progress:
            st["latency_ms"], st["latency_newest_ms"] = self.latencies
        if st.get("input_end") is None:
            st["input_end"] = self.input_ends.latest()
        held = self.held_fence()
        self.published_hold = held
        rec = StatusRecord(
            app=self.app.name,
            slot=self.slot,
            state=self.state,
            role=role,
            epoch_seen=control.epoch if control else 0,
            version=self.app.version,
            generation=self.generation,
            emitted=dict(marker.emitted) if marker else None,
            dead_letters=self.sink.counters.dead_letters,
            restore_ms=self.startup.first_batch_ms,
            state_digest=self.digests.digest,
            active_digest=self.digests.active_digest,
            corrected_epoch=self.emitter.last.corrected_epoch if self.emitter.last is not None else 0,
            invariants=self.invariants.answer,
            held_fence=held[1] if held else None,
            held_for=held[0] if held else "",
            error=error,
            pid=os.getpid(),
            host=socket.gethostname(),
            ts_ms=int(time.time() * 1000),
            **st,
        )
        self.status_producer.produce(STATUS_TOPIC, rec.to_bytes(), rec.key())
        self.status_producer.poll(0)
        self.last_publish = time.monotonic()

    def held_fence(self) -> tuple[str, dict[int, int]] | None:
        """(handoff id, fence) while this slot, the active, stays at a handoff's fence (Follower.held_fence)."""
        return self.follower.held_fence(read_applied(self.paths.cap_file))

    def publish_hold(self) -> None:
        """Say at once that this slot now holds at a fence: the handoff's cutover waits for that word, and
        an idle active has no batch whose status would carry it."""
        if self.held_fence() != self.published_hold:
            self.publish(self.last_progress)

    def alive(self) -> bool:
        """Starting up, or the query reported a batch or idleness within stall_s (its lease holds)."""
        return (
            self.state in (SlotState.STARTING, SlotState.RESTORING) or time.monotonic() - self.last_event < self.stall_s
        )

    def mark(self, phase: str) -> None:
        """A start-up phase ended (until the first batch is done; the log line says where time went)."""
        s = self.startup
        if s.first_batch_ms is None:
            s.phases.append((phase, time.monotonic() - s.started))

    def log_startup(self, progress: dict) -> None:
        marks = ", ".join(f"{phase} {t:.1f}s" for phase, t in self.startup.phases)
        spark = ", ".join(
            f"{k} {v / 1000:.1f}s"
            for k, v in sorted((progress.get("durationMs") or {}).items(), key=lambda kv: -kv[1])
            if v >= 50
        )
        log.info(
            "start-up (process start to harness %.1fs; since the harness began): %s; first batch %s: %s",
            self.startup.imports_s,
            marks,
            progress.get("batchId"),
            spark,
        )

    # --- the query ----------------------------------------------------------------------------
    def build_query(self, frame=None):
        return (
            (frame if frame is not None else self.build_frame())
            .writeStream.outputMode("update")
            .foreachBatch(self.sink.on_batch)
            .option("checkpointLocation", str(self.paths.checkpoint))
            .trigger(processingTime=f"{min(self.app.trigger_ms, TRIGGER_TICK_MS)} milliseconds")
        )

    def build_frame(self):
        """The streaming frame the sink sees: the app's output rows and the dead letters, by `kind`."""
        from spark_apps.runtime.spark import session

        self.spark = session(f"baton-{self.app.name}-{self.slot.value}", self.app, self.spark_conf)
        self.mark("spark session")
        self.packs_rows = packs_rows(self.app)
        return build_frame(
            self.spark,
            self.app,
            self.bootstrap,
            self.starting_offsets,
            self.paths.cap_file,
            self.paths.spool,
            min_batch_interval_ms=self.app.trigger_ms,
            identity_file=self.paths.checkpoint / IDENTITY_FILE,
            batch_times_file=self.paths.batch_times,
        )

    # --- the stop protocol and the run ----------------------------------------------------------
    def request_stop(self, *_args) -> None:
        self._stop.set()

    def stop_query(self) -> None:
        """Stop at a batch boundary: a running batch's sink finishes first (the lock), a batch that
        starts after that does not run (RoleGatedSink.on_batch). The lock is not held while Spark stops the query:
        Spark waits for its batch thread, which may be about to enter on_batch; holding the lock there
        deadlocked a graceful stop until the process was killed (seen in the rolling upgrade bench)."""
        self.sink.stop()
        assert self.query is not None  # started by run
        self.query.stop()

    def start_up_staged(self):
        """A staged launch's start-up beside the running slot: the Spark session and the frame (neither
        reads the checkpoint or a topic). Returns the frame, or None after an error: the launch still
        holds, then builds it again as its own and reports the error as the slot's (FAILED)."""
        try:
            return self.build_frame()
        except Exception as exc:
            log.warning(
                "staged start-up failed (%s: %s); it is reported once this launch is the slot's",
                type(exc).__name__,
                exc,
            )
            return None

    def run(self) -> int:
        """Run until stopped; returns a process exit code."""
        signal.signal(signal.SIGTERM, self.request_stop)
        frame = None
        if self.spare is not None or self.hold is not None:
            frame = self.start_up_staged()
        if self.spare is not None:
            log.info("spare driver ready: Spark is up; it holds until it replaces a driver that died")
            if not self.spare.wait(self._stop):
                self.follower.stop()
                return 0
            self.relaunch = Relaunch.from_env()
            self.priority.rebase(os.getpriority(os.PRIO_PROCESS, os.getppid()))  # its wrapper's, as a driver's
            self.startup = StartUp(imports_s=0.0)  # its restart's time is counted from here
            self.mark("spare promoted")
        if self.hold is not None:
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
            if self.relaunch is not None and not self.go_on_after_relaunch():
                return 0
            # A check asked before this start is not this process's to answer (its gate asked the
            # slots running then; a retry asks again): no digest job at every later restart.
            control, _ = self.follower.snapshot()
            self.digests.checked = self.digests.checked_active = control.check_at if control is not None else None
            self.priority.follow(self.follower.role())
            self.follower.start()
            self.input_ends.start()
            self.lease = LeaseKeeper(self.app, self.slot, self.bootstrap, self.follower, lambda: self.state, self.alive)
            self.lease.start()
            writer = self.build_query(frame)
            self.mark("query built")
            add_progress_listener(self.spark, self)
            self.state = SlotState.RESTORING
            self.publish()
            self.digests.restored_batch = last_committed_batch(self.paths.checkpoint)
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
                control, _ = self.follower.snapshot()
                try:  # under a fence the hold is looked at often: the cutover waits on its word
                    wait_s = 0.1 if control is not None and control.fence else 0.5
                    ended = self.query.awaitTermination(wait_s)  # type: ignore[arg-type]  # typed int: seconds
                except Exception:  # it failed: said below, unless this slot was fenced and goes on as the standby
                    ended = True
                if ended:
                    if self.rejoin_as_standby(writer):
                        continue
                    break  # the query ended by itself: an error, reported below
                control, _ = self.follower.snapshot()
                self.priority.follow(
                    self.follower.role(), slow_batch=time.monotonic() - self.last_event > self.stall_s / 3
                )
                spec = control.slots.get(self.slot) if control else None
                if spec is not None and spec.desired in (SlotState.STOPPED, SlotState.STOPPING, SlotState.FAILED):
                    break
                self.publish_hold()
                if self.state is SlotState.RUNNING:
                    self.digests.restore_once()
                self.digests.at_check()
                self.invariants.maybe_check()
                self.corrected_output.maybe_publish(self.spark)
            if self.query.isActive or self.query.exception() is None:  # a stop, not a failed query
                self.state = SlotState.STOPPING
                self.publish()
                self.stop_query()
                self.digests.note_left()
                self.state = SlotState.STOPPED
        except Exception as exc:  # the query failed: report it, exit non-zero
            self.state = SlotState.FAILED
            self.publish(error=f"{type(exc).__name__}: {exc}"[:2000])
            code = 1
        finally:
            failure = self.query.exception() if self.query is not None else None
            # A batch refused while stopping ends the query with that error: a clean stop all the same.
            if failure is not None and not isinstance(failure, WriterFenced) and not self.sink.refused_batch:
                reason = failure_reason(str(failure))
                # No restart can help a checkpoint its input cannot resume: its wrapper does not try.
                self.state, code = SlotState.FAILED, EXIT_CANNOT_RESUME if CANNOT_RESUME in reason else 1
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

    def go_on_after_relaunch(self) -> bool:
        """This driver was restarted by its wrapper (runtime.coordination.relaunch): record the restart and go
        on, or, if the control record wants the slot stopped by now, say so and end (exit 0: not restarted)."""
        assert self.relaunch is not None
        control, _ = self.follower.snapshot()
        why_not = wanted_running(control, self.slot)
        if why_not or control is None:
            log.warning("not restarted: %s", why_not)
            self.state = SlotState.STOPPED
            self.publish()
            self.status_producer.flush(5)
            self.input_ends.stop()
            self.follower.stop()
            return False
        from baton.control_plane import ControlPlane, KafkaControlStore

        plane = ControlPlane(KafkaControlStore(self.bootstrap), writer=f"{self.slot.value} ({SUPERVISOR})")
        recorded = record_restart(
            plane, self.app.name, self.slot, control, self.relaunch, HealthPolicy.from_app(self.app)
        )
        log.warning("%s", self.relaunch.reason())
        # An active restarted beside a running standby hands it the role rather than restore while the
        # output waits (runtime.coordination.step_down); a record moved meanwhile is left to the next look.
        if recorded is not None:
            from spark_apps.runtime.coordination.step_down import step_down_if_standby_runs

            try:
                step_down_if_standby_runs(self.bootstrap, self.app, self.slot, recorded, self.follower)
            except Exception as exc:  # never a reason not to start: it restores as the active instead
                log.warning("step-down not done (%s: %s): restarting as the active", type(exc).__name__, exc)
        return True

    def rejoin_as_standby(self, writer, wait_s: float = 10.0) -> bool:
        """The query failed because another slot fenced this one's writer: it took the active role while
        this slot was stalled (runtime.coordination.lease). Restart the query from the checkpoint as the standby, in
        this process: the failed batch was not committed, so it runs again, capped as a standby batch."""
        assert self.query is not None  # started by run
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
