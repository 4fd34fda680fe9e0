"""The standby's answer to an invariant check (baton.invariants): its app module's check_state on its own
state after its last committed batch, in the session's background pool (behind its batches, at the
standby's priority), published in its status records (StatusRecord.invariants).

The state is read from the slot's own checkpoint while its query runs on: a read the state store's
snapshot upload or maintenance changed files under fails (seen in CI while a new generation still
caught up at full speed), and a read of a later committed batch a few seconds later does not. So a
failed read is tried again, up to READ_ATTEMPTS times RETRY_AFTER_S apart, each at the newest committed
batch, without holding up the slot's loop meanwhile; after the last it answers "unchecked" (no verdict:
the gate's retry asks again), never a violation.

An app whose output is its state (runtime.state.state_image) gets its state image from the same read: the
image is armed after the sink's last batch, under its lock, and the check reads the state of exactly
that batch, once it is committed.
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
from baton.checkpoints import last_committed_batch
from baton.records import InvariantsCheck, Slot
from spark_apps.runtime.coordination.follower import Follower
from spark_apps.runtime.spark import background_jobs
from spark_apps.runtime.state.state_check import output_records, state_frame
from spark_apps.runtime.state.state_image import keeps_image

log = logging.getLogger(__name__)

READ_ATTEMPTS = 5
RETRY_AFTER_S = 3.0
EXAMPLES = 10


def check_state_at(
    spark, module, checkpoint: Path, batch_id: int, records_up_to: int = 0
) -> tuple[int, int, list[str], list | None]:
    """(state rows, violations, up to EXAMPLES of their `problem`s, the state's output records) of the
    app module's check_state on the state after `batch_id`: one read of the state, as one task (a
    digest's shape), kept in memory for the questions asked of it. The records only if asked for
    (`records_up_to` > 0) and the state has no more rows than that; else None."""
    state = state_frame(spark, checkpoint, batch_id).coalesce(1).cache()
    try:
        rows = state.count()
        problems = module.check_state(state)
        count = problems.count()
        examples = [r["problem"] for r in problems.limit(EXAMPLES).collect()] if count else []
        records = output_records(module, state) if 0 < rows <= records_up_to else None
    finally:
        state.unpersist()
    return rows, count, examples, records


def reason_of(exc: Exception) -> str:
    """The first line of the error and, for a Java error, its root cause's."""
    lines = str(exc).splitlines()
    cause = next((ln.strip() for ln in reversed(lines) if ln.strip().startswith("Caused by:")), "")
    return " ".join(x for x in (lines[0][:300] if lines else type(exc).__name__, cause[:300]) if x)


class InvariantsOnRequest:
    """Answers ControlRecord.invariants_asked for one slot while it is the standby. `spark()` is its
    session (None before it exists); `publish()` sends its status, which carries `answer`."""

    def __init__(
        self,
        app: AppDefinition,
        slot: Slot,
        checkpoint: Path,
        follower: Follower,
        spark: Callable[[], Any],
        publish: Callable[[], None],
        sink=None,
    ):
        self.app, self.slot, self.checkpoint, self.follower = app, slot, checkpoint, follower
        self.spark, self.publish = spark, publish
        self.sink = sink  # the slot's RoleGatedSink: its state image (None: none kept)
        self.answer: InvariantsCheck | None = None
        self._failed: tuple[str, int, float] = ("", 0, 0.0)  # (request, failed reads, when the last failed)

    def maybe_check(self) -> None:
        control, _ = self.follower.snapshot()
        if control is None:
            return
        asked = control.invariants_asked
        if not asked or control.active is self.slot or (self.answer is not None and self.answer.asked == asked):
            return
        spark = self.spark()
        if spark is None:
            return
        module = importlib.import_module(self.app.module)
        if not hasattr(module, "check_state"):
            self._answer(
                InvariantsCheck(asked, ok=True, note=f"{self.app.module} defines no check_state: nothing to check")
            )
            return
        batch = last_committed_batch(self.checkpoint)
        if batch is None:
            self._answer(InvariantsCheck(asked, ok=False, error="the slot has no committed batch: no state to check"))
            return
        failed, failed_at = self._failed[1:] if self._failed[0] == asked else (0, 0.0)
        if failed and time.monotonic() - failed_at < RETRY_AFTER_S:
            return
        image = self.sink.image if self.sink is not None and keeps_image(module) else None
        if image is not None:
            if image.request != asked or not image.collecting:  # once per request (again after a failed read)
                self.sink.arm_image(asked, batch)
            if image.collecting and image.after > batch:
                return  # the sink ran that batch, its commit is a moment away: read it then
            batch = image.after if image.collecting else batch
        started = time.monotonic()
        try:
            with background_jobs(spark):  # behind this slot's batches
                rows, violations, examples, records = check_state_at(
                    spark, module, self.checkpoint, batch, records_up_to=image.max_keys if image is not None else 0
                )
        except Exception as exc:  # noqa: BLE001 - the running query's maintenance moved files under the read
            failed += 1
            log.warning(
                "invariant check %s: reading the state of batch %s failed (attempt %d of %d): %s",
                asked,
                batch,
                failed,
                READ_ATTEMPTS,
                reason_of(exc),
            )
            self._failed = (asked, failed, time.monotonic())
            if image is not None:  # the next attempt reads a later batch: a new image after it
                with self.sink.lock:
                    image.drop("the state read failed")
            if failed >= READ_ATTEMPTS:
                self._answer(
                    InvariantsCheck(
                        asked, ok=False, batch_id=batch, unchecked=True, error=f"{type(exc).__name__}: {reason_of(exc)}"
                    )
                )
            return
        log.info(
            "invariant check %s: %d violation(s) in %d state rows of batch %s (%.1fs)",
            asked,
            violations,
            rows,
            batch,
            time.monotonic() - started,
        )
        self._answer(
            InvariantsCheck(
                asked, ok=violations == 0, batch_id=batch, rows=rows, violations=violations, examples=tuple(examples)
            )
        )
        if image is not None:  # after the answer: the lock waits for a running batch (27 s seen on a busy host)
            with self.sink.lock:
                if records is None:
                    image.drop(f"the state's records were not read ({rows} rows)")
                elif image.base(batch, records):
                    log.info(
                        "state image of batch %s: %d keys, kept current through batch %s",
                        batch,
                        len(records),
                        image.through,
                    )

    def _answer(self, answer: InvariantsCheck) -> None:
        self.answer = dataclasses.replace(answer, ts_ms=int(time.time() * 1000))
        self.publish()
