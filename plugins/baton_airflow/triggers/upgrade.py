"""The rolling upgrade's waits (baton.upgrade decides): a restarted slot restored the state it left,
both slots' states agree at the check position, the new active settles after the cutover."""

from __future__ import annotations

import time
from typing import Any

from baton.conditions import Check
from baton_airflow.triggers.base import SlotWaitTrigger, positions, positions_arg, run_writer
from baton_airflow.triggers.status import healthy_now, slot_history

# How often a state check position a slot read past is asked again further ahead.
MAX_STATE_CHECK_MOVES = 3


class RestoreTrigger(SlotWaitTrigger):
    """The slot restarted at `since_ms` restored exactly `expected`, the StateDigest (JSON) it left at
    its stop."""

    kind = "restore"

    def __init__(self, *, since_ms: int, expected: dict[str, Any] | None, **common: Any):
        super().__init__(**common)
        self.since_ms, self.expected = int(since_ms), expected

    def args(self) -> dict[str, Any]:
        return dict(since_ms=self.since_ms, expected=self.expected)

    def check(self) -> Check:
        from baton import upgrade
        from baton.records import StateDigest

        left = StateDigest.from_json(self.expected, "the digest the slot left")
        return upgrade.restore_check(left, slot_history(self.bootstrap, self.app, self.slot), self.since_ms)


class StateCheckTrigger(SlotWaitTrigger):
    """Both slots' digests at the check position `target` agree under `policy` (baton.upgrade.Policy);
    `slot` is the standby. A slot that read past the position within a batch has no state there: the
    check is asked again further ahead (twice as far each time, from where the input is now, starting
    from `ahead_s`), here and at once, up to MAX_STATE_CHECK_MOVES times (`moves` so far); a retry of
    the step would otherwise find the same passed position again. The move is a control write by
    `writer` (the deferring task's run)."""

    kind = "state check"

    def __init__(
        self,
        *,
        target: dict[Any, int],
        policy: str = "exact",
        ahead_s: float = 2.0,
        moves: int = 0,
        writer: str | None = None,
        **common: Any,
    ):
        super().__init__(**common)
        self.target, self.policy = positions(target), str(policy)
        self.ahead_s, self.moves, self.writer = float(ahead_s), int(moves), run_writer(writer)

    def args(self) -> dict[str, Any]:
        return dict(
            target=positions_arg(self.target),
            policy=self.policy,
            ahead_s=self.ahead_s,
            moves=self.moves,
            writer=self.writer,
        )

    def check(self) -> Check:
        from baton import upgrade
        from baton.records import Slot

        standby = slot_history(self.bootstrap, self.app, self.slot)
        active = slot_history(self.bootstrap, self.app, Slot(self.slot).other.value)
        missed = upgrade.missed_state_check(active, standby, self.target)
        if missed is None:
            return upgrade.states_agree(active, standby, self.target, upgrade.Policy(self.policy))
        if self.moves >= MAX_STATE_CHECK_MOVES:
            return Check(
                failed=True,
                message=f"{missed}, after {self.moves} moves further ahead: the slots' "
                "batches span more input than the check can be planned ahead of",
            )
        return self.move_further_ahead(missed, active)

    def move_further_ahead(self, missed: str, active: list) -> Check:
        from baton import upgrade
        from baton.apps import load_app
        from baton.control_plane import ControlPlane, KafkaControlStore
        from baton.handoff import plan_ahead
        from baton.kafka.tail import end_offsets

        app = load_app(self.app)
        ahead_s = max(self.ahead_s, 1.0) * 2 ** (self.moves + 1)
        ahead = plan_ahead(
            lambda: active,
            lambda: end_offsets(self.bootstrap, app.input.topic, range(app.input.partitions)),
            app.input.partitions,
            ahead_s,
        )
        plane = ControlPlane(KafkaControlStore(self.bootstrap), writer=self.writer)
        # move_state_check adopts a position a try before this one asked meanwhile (a re-created trigger)
        rec = plane.update(app.name, upgrade.move_state_check(self.target, ahead))
        if rec.check_at is None:
            return Check(failed=True, message=f"{missed}, and no state check is asked any more (a cutover cleared it)")
        self.target, self.moves = dict(rec.check_at), self.moves + 1
        return Check(message=f"{missed}; the check is asked again at {rec.check_at} ({ahead_s:g} s of input ahead)")


class SettleTrigger(SlotWaitTrigger):
    """The new active `slot` keeps the SLA for `settle_s` after it took over at `since_ms` (role epoch
    `epoch`, fence `fence`): alive and healthy, every batch within `max_batch_ms`, output flowing, lag
    within `max_lag` (0: the app's budget) at the end; `correct`: its corrected output must be in
    (baton.upgrade.settle_check). Fails at the first breach."""

    kind = "settle"

    def __init__(
        self,
        *,
        since_ms: int,
        epoch: int,
        fence: dict[Any, int],
        settle_s: float,
        max_batch_ms: int,
        max_lag: int = 0,
        correct: bool = False,
        record_cost_us: int | None = None,
        **common: Any,
    ):
        super().__init__(**common)
        self.since_ms, self.epoch, self.fence = int(since_ms), int(epoch), positions(fence)
        self.settle_s, self.max_batch_ms, self.max_lag = float(settle_s), int(max_batch_ms), int(max_lag)
        self.correct = bool(correct)
        self.record_cost_us = int(record_cost_us) if record_cost_us is not None else None

    def args(self) -> dict[str, Any]:
        return dict(
            since_ms=self.since_ms,
            epoch=self.epoch,
            fence=positions_arg(self.fence),
            settle_s=self.settle_s,
            max_batch_ms=self.max_batch_ms,
            max_lag=self.max_lag,
            correct=self.correct,
            record_cost_us=self.record_cost_us,
        )

    def check(self) -> Check:
        from baton import upgrade
        from baton.apps import load_app
        from baton.kafka.markers import read_last_marker
        from baton.kafka.tail import end_offsets

        app = load_app(self.app)
        history = slot_history(self.bootstrap, self.app, self.slot)
        marker = read_last_marker(self.bootstrap, app.commits_topic, app.name)
        end = end_offsets(self.bootstrap, app.input.topic, range(app.input.partitions))
        healthy = healthy_now(self.bootstrap, self.app, self.slot, history)
        return upgrade.settle_check(
            history,
            marker,
            self.epoch,
            self.fence,
            end,
            healthy,
            int(time.time() * 1000),
            self.since_ms,
            self.settle_s,
            self.max_batch_ms,
            self.max_lag or app.max_lag_records,
            correct=self.correct,
            record_cost_us=self.record_cost_us,
        )
