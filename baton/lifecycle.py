"""The slot lifecycle: one enum (baton.records.SlotState) and an explicit transition table.

    STOPPED ──start──▶ STARTING ──▶ RESTORING ──▶ RUNNING ──stop──▶ STOPPING ──▶ STOPPED
    RUNNING ──died, health restart──▶ STARTING
        any state ──crash / crash-loop guard──▶ FAILED ──start (operator)──▶ STARTING

The control plane records the slot's desired lifecycle state in the control record before it acts
(intent first); the slot's observed state is in its status records.

A move not in the table is a programming or operator error and raises IllegalTransition.
"""

from __future__ import annotations

from baton.records import SlotState

S = SlotState

TRANSITIONS: dict[SlotState, frozenset[SlotState]] = {
    S.STOPPED: frozenset({S.STARTING}),
    # A slot can die before its first batch (bad code): STARTING -> FAILED.
    S.STARTING: frozenset({S.RESTORING, S.RUNNING, S.STOPPING, S.FAILED, S.STOPPED}),
    S.RESTORING: frozenset({S.RUNNING, S.STOPPING, S.FAILED, S.STOPPED}),
    # RUNNING -> STARTING: the health DAG restarts a slot that died (counted by the crash-loop guard).
    S.RUNNING: frozenset({S.STARTING, S.STOPPING, S.FAILED, S.STOPPED}),
    S.STOPPING: frozenset({S.STOPPED, S.FAILED}),
    # Leaving FAILED is an explicit operator action (start), never automatic.
    S.FAILED: frozenset({S.STARTING, S.STOPPING, S.STOPPED}),
}


class IllegalTransition(ValueError):
    def __init__(self, current: SlotState, target: SlotState):
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[current])) or "none"
        super().__init__(f"slot cannot go from {current.value} to {target.value} (allowed: {allowed})")
        self.current, self.target = current, target


def can_transition(current: SlotState, target: SlotState) -> bool:
    return current == target or target in TRANSITIONS[current]


def check_transition(current: SlotState, target: SlotState) -> SlotState:
    """Return target if the move is legal (staying put is always legal: steps are idempotent)."""
    if not can_transition(current, target):
        raise IllegalTransition(current, target)
    return target
