"""A reprocess request, checked before anything changes (seed 003, "Recovering from Bugs").

A reprocess runs a new generation of an app (usually a fixed version) in the standby slot from a start
position, with fresh state, while the active keeps serving; once it has caught up and its state passes
the app's own checks, it takes over at a fence and publishes its whole state, so downstream's compacted
view holds the corrected value of every key (or, staged: the run ends there, see ENDS). The previous generation stays hot in the other slot: the
way back is a corrected-output cutover to it (baton_cutover with correct=true).

Every refusal names what is wrong; nothing is written before the request passed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from baton.records import ControlRecord, Positions, SlotState

STARTS = ("earliest", "timestamp", "offsets")
# What ends the run once the new generation has caught up and passed its checks: "handover" cuts over
# to it with corrected output; "standby" stops there, the new generation hot in the standby slot and
# the previous one still live (a staged reprocess: look at the new state first, then hand over with
# baton_cutover {"correct": true}, or drop it with baton_reprocess_confirm).
ENDS = ("handover", "standby")


class RequestRefused(ValueError):
    """The request cannot run; the message says why. Nothing was changed."""


@dataclass(frozen=True)
class Start:
    kind: str
    timestamp_ms: int | None = None
    offsets: Positions | None = None

    @classmethod
    def parse(cls, kind: Any, timestamp_ms: Any = None, offsets: Any = None) -> Start:
        if kind not in STARTS:
            raise RequestRefused(f"start {kind!r} is not one of {', '.join(STARTS)}")
        if kind == "timestamp":
            if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int) or timestamp_ms < 0:
                raise RequestRefused(
                    f"start 'timestamp' needs start_timestamp_ms (epoch ms >= 0), got {timestamp_ms!r}"
                )
            return cls(kind, timestamp_ms=timestamp_ms)
        if kind == "offsets":
            if not isinstance(offsets, Mapping) or not offsets:
                raise RequestRefused(f"start 'offsets' needs start_offsets {{partition: offset}}, got {offsets!r}")
            try:
                parsed = {int(p): int(o) for p, o in offsets.items()}
            except (TypeError, ValueError):
                raise RequestRefused(f"start_offsets must map partition numbers to offsets, got {offsets!r}") from None
            if any(isinstance(o, bool) for o in offsets.values()) or any(o < 0 for o in parsed.values()):
                raise RequestRefused(f"start_offsets must be offsets >= 0, got {offsets!r}")
            return cls(kind, offsets=parsed)
        return cls(kind)


def parse_end(value: Any) -> str:
    if value not in ENDS:
        raise RequestRefused(f"end {value!r} is not one of {', '.join(ENDS)}")
    return value


def resolve_start(
    start: Start,
    partitions: int,
    lows: Positions,
    ends: Positions,
    now_ms: int,
    for_timestamp: Callable[[int], Positions],
) -> Positions:
    """The start offset of every partition, or RequestRefused. `for_timestamp(ts)` asks the broker
    (baton.kafka.positions.offsets_for_timestamp) and is only called for a valid timestamp."""
    if start.kind == "earliest":
        return {p: lows.get(p, 0) for p in range(partitions)}
    if start.kind == "timestamp":
        timestamp_ms = start.timestamp_ms
        assert timestamp_ms is not None  # Start.parse sets it for this kind
        if timestamp_ms > now_ms:
            raise RequestRefused(
                f"start_timestamp_ms {timestamp_ms} is in the future (now {now_ms}): "
                "there is nothing to replay from there"
            )
        return for_timestamp(timestamp_ms)
    offsets = start.offsets
    assert offsets is not None  # Start.parse sets them for the remaining kind, "offsets"
    unknown = sorted(p for p in offsets if not 0 <= p < partitions)
    if unknown:
        raise RequestRefused(f"partition(s) {unknown} do not exist: the input topic has partitions 0..{partitions - 1}")
    missing = sorted(set(range(partitions)) - set(offsets))
    if missing:
        raise RequestRefused(f"start_offsets must name every partition of the input; missing {missing}")
    for p, o in sorted(offsets.items()):
        if o > ends.get(p, 0):
            raise RequestRefused(f"offset {o} on partition {p} is beyond the log end {ends.get(p, 0)}")
        if o < lows.get(p, 0):
            raise RequestRefused(
                f"offset {o} on partition {p} is before the log start {lows.get(p, 0)} (deleted by retention)"
            )
    return dict(offsets)


def check_app_state(rec: ControlRecord | None, now_ms: int) -> None:
    """Both slots run, no handoff and no other long operation is under way."""
    if rec is None:
        raise RequestRefused("the app has never been started: start it (baton_lifecycle) first")
    if holder := rec.held_by_another(now_ms):
        raise RequestRefused(f"{holder} is under way: one at a time")
    if rec.fence is not None:
        raise RequestRefused(f"a fence {rec.fence} is set: a handoff is under way")
    for slot, spec in sorted(rec.slots.items()):
        if spec.desired is not SlotState.RUNNING:
            raise RequestRefused(f"slot {slot.value} is {spec.desired.value}: a reprocess needs both slots running")
    if len(rec.slots) < 2:
        raise RequestRefused("a reprocess needs both slots running (one is not started)")


def begin_operation(name: str, expires_ms: int, now_ms: int):
    """Change: mark `name` under way (refused if another one is and has not expired). A retry with the
    same name is a no-op."""

    def change(rec: ControlRecord) -> ControlRecord:
        if rec.operation == name:
            return rec
        if holder := rec.held_by_another(now_ms):
            raise RequestRefused(f"{holder} is under way: one at a time")
        return dataclasses.replace(rec, operation=name, operation_expires_ms=expires_ms)

    return change


def end_operation(name: str):
    """Change: `name` is over (a no-op if it is not the one under way)."""

    def change(rec: ControlRecord) -> ControlRecord:
        if rec.operation != name:
            return rec
        return dataclasses.replace(rec, operation="", operation_expires_ms=0)

    return change
