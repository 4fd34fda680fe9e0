"""A slot's state digests (spark_apps.runtime.state.state_check), the evidence the rolling upgrade's gates
compare: what a restart restored, what a stop left, and both slots' state at a check position.

A digest is a Spark job over committed checkpoint files, run behind the query's batches
(background_jobs); a failure is logged, never fatal: the gate waiting for it times out.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from baton.apps import AppDefinition
from baton.checkpoints import batch_ending_at, last_committed_batch, state_operators
from baton.generations import SlotPaths, slot_paths
from baton.records import Positions, Slot, StateDigest
from spark_apps.runtime.coordination.follower import Follower
from spark_apps.runtime.spark import background_jobs
from spark_apps.runtime.state.state_check import digest_state

log = logging.getLogger(__name__)

# How long a stopping slot waits for its last committed batch's progress event (Spark's listener bus
# delivers it just after the commit) before it digests its state instead (StateDigests.note_left).
LEFT_PROGRESS_WAIT_S = 2.0


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
        raise ValueError(
            f"{app.module} has state.ttl but no state_live(state, ttl): its slots' digests could not agree"
        )
    return lambda state: mod.state_live(state, app.state.ttl)


class StateDigests:
    """The digests of one slot. `spark()` is its session (None before it exists); `publish()` sends
    the slot's status, which carries `digest` and `active_digest`; `last_progress()` is its query's
    last progress event."""

    def __init__(
        self,
        app: AppDefinition,
        slot: Slot,
        state_dir: Path,
        paths: SlotPaths,
        follower: Follower,
        spark: Callable[[], Any],
        publish: Callable[[], None],
        last_progress: Callable[[], dict | None],
    ):
        self.app, self.slot, self.state_dir, self.paths, self.follower = app, slot, state_dir, paths, follower
        self.spark, self.publish, self.last_progress = spark, publish, last_progress
        self.digest: StateDigest | None = None  # the last state digest taken (restore, check or stop)
        self.active_digest: StateDigest | None = None  # the active's state at a check, digested here
        self.restored_batch: int | None = None  # the last committed batch at start: what the query restores
        self.restore_digested = False
        self.checked: Positions | None = None  # the check_at position digested (or found passed) last
        self.checked_active: Positions | None = None  # the same, for the active's state

    def take(self, batch_id: int | None, at: str, position: Positions | None = None) -> None:
        """Digest the committed state after `batch_id` and publish it; None = nothing committed yet
        (the empty state)."""
        digest = self.of_checkpoint(self.paths.checkpoint, batch_id, at, position)
        if digest is not None:
            self.digest = digest
            self.publish()

    def restore_once(self) -> None:
        """What the query restored (the restore check), digested once it runs (a first batch or idle),
        so the digest's Spark job is not on the restart's critical path."""
        if not self.restore_digested:
            self.restore_digested = True
            self.take(self.restored_batch, "restore")

    def of_checkpoint(
        self, checkpoint: Path, batch_id: int | None, at: str, position: Positions | None = None
    ) -> StateDigest | None:
        """The digest of `checkpoint`'s committed state after `batch_id` (None: the empty state), or
        None if it could not be taken (logged)."""
        started = time.monotonic()
        try:
            if batch_id is None:
                digest = StateDigest(
                    at=at, batch_id=-1, rows=0, digest="0" * 16, schema="", ts_ms=int(time.time() * 1000)
                )
            else:
                spark = self.spark()
                with background_jobs(spark):  # behind the query's batches
                    digest = digest_state(spark, checkpoint, batch_id, at, live=live_rows(self.app, at))
            if position is not None:
                digest = dataclasses.replace(digest, position=dict(position))
        except Exception as exc:  # noqa: BLE001 - a digest is evidence for a gate, not the slot's job
            log.error("state digest (%s, batch %s of %s) failed: %s", at, batch_id, checkpoint, exc)
            return None
        log.info(
            "state digest (%s, batch %s of %s): %d rows in %.1fs",
            at,
            batch_id,
            checkpoint,
            digest.rows,
            time.monotonic() - started,
        )
        return digest

    def note_left(self) -> None:
        """What this stopped slot leaves for its next start (the restore check compares against it):
        its last committed batch and the state rows its query counted there, off that batch's progress
        event, without a digest job: a stop digest took 3.3-4.4 s at 100k keys in the product-path
        bench, all of it downtime of an upgrade's restart (more input to catch up on after it). A query
        with other than one stateful operator, whose committed batch's progress event does not come, or
        whose state store does not count its rows (the app's state.count_rows) is digested as before."""
        batch = last_committed_batch(self.paths.checkpoint)
        if not self.app.state.count_rows:  # Spark's numRowsTotal is 0 then, never the rows it left
            self.take(batch, "stop")
            return
        deadline = time.monotonic() + LEFT_PROGRESS_WAIT_S
        while batch is not None:  # the listener may deliver the last batch's event just after its commit
            progress = self.last_progress() or {}
            if int(progress.get("batchId", -1)) == batch:
                ops = progress.get("stateOperators") or []
                if len(ops) == 1 and len(state_operators(self.paths.checkpoint)) == 1:
                    self.digest = StateDigest(
                        at="stop",
                        batch_id=batch,
                        rows=int(ops[0].get("numRowsTotal", 0)),
                        digest="",
                        schema="",
                        ts_ms=int(time.time() * 1000),
                    )
                    self.publish()
                    return
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        self.take(batch, "stop")

    def at_check(self) -> None:
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
        if self.checked_active != target and spec is not None:
            active = slot_paths(self.state_dir, self.app.name, control.active, spec.generation).checkpoint
            reached, digest = self.at_position(active, target)
            if reached:
                self.checked_active = target
            if digest is not None:
                self.active_digest = digest
                self.publish()
        if self.checked != target:
            reached, digest = self.at_position(self.paths.checkpoint, target)
            if reached:
                self.checked = target
            if digest is not None:
                self.digest = digest
                self.publish()

    def at_position(self, checkpoint: Path, target: Positions) -> tuple[bool, StateDigest | None]:
        """(whether `checkpoint`'s query reached the check position `target`, the digest of its state
        there: "check", or "missed" when it read past it within a batch). Not reached: look again. A
        digest that failed is None (logged; the gate waiting for it times out and a retry asks anew)."""
        batch, passed = batch_ending_at(checkpoint, target)
        if batch is not None:
            return True, self.of_checkpoint(checkpoint, batch, "check", position=target)
        if passed:
            log.warning("no committed batch of %s ends at %s: no state digest there", checkpoint, target)
            return True, StateDigest(
                at="missed", batch_id=-1, rows=0, digest="", schema="", ts_ms=int(time.time() * 1000), position=target
            )
        return False, None
