"""Corrected output: a reprocess's cutover (or its way back) has the new active publish its whole state
as output once, so that a compacted view of the output holds its value for every key
(ControlRecord.correct_epoch).

Off the output's path: the new active emits its batches from the fence F as in any cutover, while the
state at one of its committed batches K is read in a background Spark job; then, under the batch lock,
that state goes out less the keys the slot emitted in batches after K, in one transaction whose marker
moves no position and says the correction is in (CommitMarker.corrected_epoch). Every key then ends
with its newest value: the one emitted after K (newer than K's), or K's, which nothing after K changed.
K must stand at or past F: the old active's output before F holds the values being corrected, so a
state short of F would put back values older than what the old active emitted.

Why not publish at F, before the first batch past it: that waited for the new active to stand at F
(the standby could not trail) and put a state read of every key between the last output before F and
the first after it, on a 2-core machine several seconds of stopped output.
"""

from __future__ import annotations

from collections.abc import Iterable

from baton.records import Role, Slot

Pairs = list[tuple[bytes | None, bytes | None]]


class EmittedKeys:
    """The keys each batch emitted while a correction was due: what a state read at an earlier batch
    must leave out."""

    def __init__(self) -> None:
        self._by_batch: dict[int, set] = {}

    def note(self, batch_id: int, output: Iterable[tuple[bytes | None, bytes | None]]) -> None:
        self._by_batch[batch_id] = {key for key, _ in output}

    def noted(self, batch_id: int) -> bool:
        return batch_id in self._by_batch

    def after(self, batch_id: int | None) -> set:
        """Keys emitted by batches later than `batch_id` (None: every batch noted)."""
        return set().union(*(keys for b, keys in self._by_batch.items() if batch_id is None or b > batch_id))

    def clear(self) -> None:
        self._by_batch.clear()


def leave_out(rows: Pairs, newer: set) -> Pairs:
    """The state's output rows less those whose key has a newer value downstream already."""
    return [(k, v) for k, v in rows if k not in newer] if newer else rows


def correction_due(control, slot: Slot, emitter) -> bool:
    """`slot` is the active at an epoch that asked for corrected output, and (as far as its writer
    `emitter` knows: it may not hold it yet) the output does not hold it."""
    if control is None or control.role_of(slot) is not Role.ACTIVE or control.correct_epoch != control.epoch:
        return False
    return not (emitter.holding and emitter.epoch == control.epoch and emitter.corrected)
