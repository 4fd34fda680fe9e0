"""A reprocess's invariant gate: the app's own checks (its module's check_state) on the new generation's
state, run by the slot that holds it, the standby, when the gate asks through the control record.

The gate writes a request id (ControlRecord.invariants_asked, its run and try); the standby checks its
state after its last committed batch, behind its own batches, and answers in its status records
(StatusRecord.invariants, spark_apps.runtime.state.invariant_check). The check used to be a Spark
application of its own beside both slots: on a 2-core machine ~10 s of start-up at a core and a second
JVM's memory, for a read the standby's session does in its background pool, at the standby's
priority. The active, whose batches carry the output, is never asked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from baton.conditions import Check
from baton.records import ControlRecord, InvariantsCheck, StatusRecord


def ask_invariants(asked: str):
    """Change: the standby checks the app's invariants on its state once for the request `asked` (a new
    id asks again; the same one, a retried write, is a no-op)."""

    def change(rec: ControlRecord) -> ControlRecord:
        if rec.invariants_asked == asked:
            return rec
        return dataclasses.replace(rec, invariants_asked=asked)

    return change


def answered(asked: str):
    """Change: the request `asked` was answered; no later launch of the standby answers it again (a new
    launch starts without an answer and would read its state once more). A newer request is kept. A
    role change clears any request too (baton.handoff): a check judges a standby's state."""

    def change(rec: ControlRecord) -> ControlRecord:
        if rec.invariants_asked != asked:
            return rec
        return dataclasses.replace(rec, invariants_asked="")

    return change


def answer_to(history: Sequence[StatusRecord], asked: str, generation: int) -> InvariantsCheck | None:
    """The answer to the request `asked` in a slot's status `history`, from a launch of `generation` (a
    record of another generation in the same slot does not hold the state being judged)."""
    for rec in reversed(history):
        if rec.generation == generation and rec.invariants is not None and rec.invariants.asked == asked:
            return rec.invariants
    return None


def answer_check(history: Sequence[StatusRecord], asked: str, generation: int, now_ms: int) -> Check:
    """The gate's wait: met once the slot answered `asked` (whatever the verdict: the step judges it);
    meanwhile, where the slot stands, so a long wait says whether the slot is busy or gone quiet."""
    if answer_to(history, asked, generation) is not None:
        return Check(met=True, message=f"generation {generation} answered the invariant check {asked}")
    own = [rec for rec in history if rec.generation == generation]
    if not own:
        return Check(message=f"no status from generation {generation} yet")
    last = own[-1]
    return Check(
        message=f"no answer yet; generation {generation} last reported {last.state.value} at batch "
        f"{last.batch_id}, {max(0, now_ms - last.ts_ms) / 1000:.0f} s ago"
    )


def violations_text(check: InvariantsCheck) -> str:
    """What a failed check found, for the run's reason."""
    examples = "; ".join(check.examples)
    return f"{check.violations} violation(s) in {check.rows} state rows of batch {check.batch_id}" + (
        f", e.g. {examples}" if examples else ""
    )
