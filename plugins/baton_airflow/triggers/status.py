"""Waits in the triggerer (no worker slot held) until a slot's status records meet a condition.

Serialisable: only plain values cross to the triggerer. Each poll reads the status topic's tail in a
thread with a fresh consumer that is closed before the poll returns, so a cancelled trigger leaves
nothing open.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

def met_or_raise(context: Any, event: dict[str, Any]) -> str:
    """A deferred task resumed with this trigger's event: its message if the condition was met; else the
    reason is pushed (XCom "reason", for a later step that reports it: an abort, a rollback) and the task
    fails, for good if the condition failed, with a retry if it timed out."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    if event.get("status") != "met":
        context["ti"].xcom_push(key="reason", value=event.get("message", ""))
    if event.get("status") == "failed":
        raise AirflowFailException(event.get("message", ""))
    if event.get("status") != "met":
        raise AirflowException(event.get("message", f"unexpected trigger event {event!r}"))
    return event["message"]


# "states": how often a state check position a slot read past is asked again further ahead.
MAX_STATE_CHECK_MOVES = 3

# How often a waiting trigger logs where its condition stands (the task's log shows a trigger's lines).
PROGRESS_EVERY_S = 10.0

CONDITIONS = ("running", "position", "lag", "cutover", "healthy", "restore", "states", "settle")


class SlotStatusTrigger(BaseTrigger):
    def __init__(self, app: str, slot: str, condition: str, bootstrap: str, *, since_ms: int = 0,
                 pid: int | None = None, target: dict[str, int] | None = None, max_lag: int = 0,
                 timeout_s: float = 600.0, poll_s: float = 2.0,
                 deadline_ts: float | None = None, epoch: int = 0, max_lag_s: float | None = None,
                 expected: dict[str, Any] | None = None, policy: str = "exact", settle_s: float = 0.0,
                 max_batch_ms: int = 0, trail_records: int = 0, correct: bool = False, ahead_s: float = 2.0,
                 moves: int = 0, writer: str | None = None):
        super().__init__()
        if condition not in CONDITIONS:
            raise ValueError(f"condition {condition!r} is not one of {CONDITIONS}")
        self.app, self.slot, self.condition, self.bootstrap = app, slot, condition, bootstrap
        self.since_ms, self.pid, self.target = since_ms, pid, target or {}
        self.max_lag = max_lag
        self.timeout_s, self.poll_s = timeout_s, poll_s
        # "cutover": the handoff's gate at the fence `target` (F), set at `epoch`, `slot` the standby, which
        # may be `trail_records` short of F; the moment it is met this trigger writes the cutover
        # (`correct`: with corrected output), met once the record shows it (baton.handoff.cut_over_at_fence)
        self.epoch, self.trail_records, self.correct = epoch, trail_records, correct
        # "lag": the warm-up gate, `slot` (a standby) within max_lag records and max_lag_s seconds of input
        # of the active's output, beyond what the app's standby pace holds it back by
        self.max_lag_s = max_lag_s
        self.expected = expected  # "restore": the StateDigest (JSON) the slot left at its stop
        # "states": baton.upgrade.Policy; `slot` is the standby, `target` the check position, asked
        # `ahead_s` ahead of the input, moved further ahead `moves` times so far
        self.policy, self.ahead_s, self.moves = policy, ahead_s, moves
        # Who the control writes made here are by: the deferring task's run (the history names it).
        if writer is None:
            from baton_airflow.hooks.control import current_run_writer

            writer = current_run_writer()
        self.writer = writer
        # "settle": `slot` is the new active since `since_ms`, at role epoch `epoch`, fence `target`;
        # `correct`: its corrected output must be in
        self.settle_s, self.max_batch_ms = settle_s, max_batch_ms
        # Absolute, so a trigger re-created after a triggerer restart keeps the original deadline.
        self.deadline_ts = deadline_ts if deadline_ts is not None else time.time() + timeout_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", dict(
            app=self.app, slot=self.slot, condition=self.condition, bootstrap=self.bootstrap,
            since_ms=self.since_ms, pid=self.pid, target=self.target, max_lag=self.max_lag,
            timeout_s=self.timeout_s, poll_s=self.poll_s,
            deadline_ts=self.deadline_ts, epoch=self.epoch, max_lag_s=self.max_lag_s, expected=self.expected,
            policy=self.policy, settle_s=self.settle_s, max_batch_ms=self.max_batch_ms,
            trail_records=self.trail_records, correct=self.correct, ahead_s=self.ahead_s, moves=self.moves,
            writer=self.writer))

    def check(self):
        """One blocking poll (runs in a thread): the condition's Check."""
        from baton import conditions
        from baton_airflow.hooks.control import read_slot_status

        if self.condition == "cutover":
            return self.check_cutover()
        history = read_slot_status(self.bootstrap, self.app, self.slot, last_n=2000)
        if self.condition == "running":
            return conditions.slot_running(history, self.since_ms, self.pid)
        if self.condition == "healthy":
            return self.check_healthy(history)
        if self.condition == "position":
            return conditions.position_reached(history, {int(p): o for p, o in self.target.items()}, self.since_ms)
        if self.condition in ("restore", "states", "settle"):
            return self.check_upgrade(history)
        return self.check_following(history)

    def check_following(self, history):
        """The warm-up gate: `slot` (the standby) against what the active has emitted, its pace allowed
        for (baton.conditions.following)."""
        from baton import conditions
        from baton.apps import load_app
        from baton.records import Slot
        from baton_airflow.hooks.control import read_slot_status
        from baton.kafka.markers import read_last_marker

        app = load_app(self.app)
        marker = read_last_marker(self.bootstrap, app.commits_topic, app.name)
        active = read_slot_status(self.bootstrap, self.app, Slot(self.slot).other, last_n=200)
        return conditions.following(history, marker, conditions.arrival_rate(active), self.max_lag,
                                    self.max_lag_s, app.standby_pace_ms / 1000, self.since_ms)

    def check_cutover(self):
        """The gate at the fence and, once met, the cutover: written here, in the triggerer, because a
        task started after the gate would add its start-up to the time the output stands still."""
        from baton.apps import load_app
        from baton.control_plane import ControlPlane, KafkaControlStore
        from baton.handoff import cut_over_at_fence
        from baton.records import Slot
        from baton_airflow.hooks.control import read_slot_status
        from baton.kafka.markers import read_last_marker

        return cut_over_at_fence(
            ControlPlane(KafkaControlStore(self.bootstrap), writer=self.writer), self.app, Slot(self.slot), self.epoch,
            {int(p): int(o) for p, o in self.target.items()},
            lambda: read_last_marker(self.bootstrap, load_app(self.app).commits_topic, self.app),
            lambda: read_slot_status(self.bootstrap, self.app, self.slot, last_n=500),
            trail_records=self.trail_records, correct=self.correct)

    def check_upgrade(self, history):
        """The rolling upgrade's gates (baton.upgrade)."""
        from baton import upgrade
        from baton.apps import load_app
        from baton.kafka.tail import end_offsets
        from baton.records import StateDigest
        from baton.kafka.markers import read_last_marker

        fence = {int(p): int(o) for p, o in self.target.items()}
        if self.condition == "restore":
            left = StateDigest.from_json(self.expected, "the digest the slot left")
            return upgrade.restore_check(left, history, self.since_ms)
        if self.condition == "states":
            return self.check_states(history)
        app = load_app(self.app)
        marker = read_last_marker(self.bootstrap, app.commits_topic, app.name)
        end = end_offsets(self.bootstrap, app.input.topic, range(app.input.partitions))
        return upgrade.settle_check(history, marker, self.epoch, fence, end, self.check_healthy(history),
                                    int(time.time() * 1000), self.since_ms, self.settle_s, self.max_batch_ms,
                                    self.max_lag or app.max_lag_records, correct=self.correct)

    def check_states(self, standby):
        """Both slots' digests at the check position `target` agree. A slot that read past the position
        within a batch has no state there: the check is asked again further ahead (twice as far each
        time, from where the input is now), here and at once, up to MAX_STATE_CHECK_MOVES times; a
        retry of the step would otherwise find the same passed position again."""
        from baton import upgrade
        from baton.apps import load_app
        from baton.conditions import Check
        from baton.control_plane import ControlPlane, KafkaControlStore
        from baton.handoff import plan_ahead
        from baton.kafka.tail import end_offsets
        from baton.records import Slot, positions_to_json
        from baton_airflow.hooks.control import read_slot_status

        position = {int(p): int(o) for p, o in self.target.items()}
        active = read_slot_status(self.bootstrap, self.app, Slot(self.slot).other, last_n=2000)
        missed = upgrade.missed_state_check(active, standby, position)
        if missed is None:
            return upgrade.states_agree(active, standby, position, upgrade.Policy(self.policy))
        if self.moves >= MAX_STATE_CHECK_MOVES:
            return Check(failed=True, message=f"{missed}, after {self.moves} moves further ahead: the slots' "
                                              "batches span more input than the check can be planned ahead of")
        app = load_app(self.app)
        ahead_s = max(self.ahead_s, 1.0) * 2 ** (self.moves + 1)
        ahead = plan_ahead(lambda: active, lambda: end_offsets(self.bootstrap, app.input.topic,
                                                               range(app.input.partitions)),
                           app.input.partitions, ahead_s)
        plane = ControlPlane(KafkaControlStore(self.bootstrap), writer=self.writer)
        rec = plane.update(app.name, upgrade.move_state_check(position, ahead))
        if rec.check_at is None:
            return Check(failed=True, message=f"{missed}, and no state check is asked any more (a cutover cleared it)")
        self.target, self.moves = positions_to_json(rec.check_at), self.moves + 1
        return Check(message=f"{missed}; the check is asked again at {rec.check_at} ({ahead_s:g} s of input ahead)")

    def check_healthy(self, history):
        """The health DAG's rules (heartbeat age, progress, batch time, budgets) on this slot now."""
        from baton.apps import load_app
        from baton.health import HealthPolicy, assess, healthy_check
        from baton.kafka.control_log import read_control
        from baton.kafka.tail import end_offsets
        from baton.records import Slot
        from baton.caps import compute_cap
        from baton.kafka.markers import read_last_marker

        app, slot = load_app(self.app), Slot(self.slot)
        record = read_control(self.bootstrap, app.name)
        spec = record.slots.get(slot) if record else None
        marker = read_last_marker(self.bootstrap, app.commits_topic, app.name)
        end = end_offsets(self.bootstrap, app.input.topic, range(app.input.partitions))
        now_ms, policy = int(time.time() * 1000), HealthPolicy.from_app(app)
        health = assess(app, slot, spec, history, end, None, now_ms, policy,
                        cap=compute_cap(record, slot, marker, app.input.partitions),
                        started_ms=spec.started_ms if spec and spec.started_ms else None)
        return healthy_check(health, now_ms, policy)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        what = f"{self.app}/{self.slot} {self.condition}"
        last_error = ""
        logged_at = time.monotonic()
        while True:
            try:
                result = await asyncio.to_thread(self.check)
                last_error = ""
            except Exception as exc:  # the broker may blip: keep waiting, report it if we time out
                result, last_error = None, f"{type(exc).__name__}: {exc}"
            if result is not None and (result.met or result.failed):
                status = "met" if result.met else "failed"
                yield TriggerEvent({"status": status, "message": f"{what}: {result.message}"})
                return
            if time.monotonic() - logged_at >= PROGRESS_EVERY_S:  # a long wait says where it stands
                logged_at = time.monotonic()
                self.log.info("%s: waiting: %s; %.0f s left", what,
                              (result.message if result is not None else last_error) or "nothing reported yet",
                              max(0.0, self.deadline_ts - time.time()))
            if time.time() >= self.deadline_ts:
                extra = f" (last error: {last_error})" if last_error else ""
                yield TriggerEvent({"status": "timeout",
                                    "message": f"{what}: not met within {self.timeout_s:.0f}s{extra}"})
                return
            await asyncio.sleep(self.poll_s)
