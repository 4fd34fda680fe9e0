"""Waits on what one slot reports: it runs, it reached a position, it follows the active closely
enough (the warm-up gate), it is healthy now. Each is a trigger of its own (baton_airflow.triggers.base);
the decisions are baton.conditions' and baton.health's pure functions."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from baton.conditions import Check
from baton.records import StatusRecord
from baton_airflow.triggers.base import SlotWaitTrigger, positions, positions_arg


def slot_history(bootstrap: str, app: str, slot: str, last_n: int = 2000) -> list[StatusRecord]:
    from baton_airflow.hooks.control import read_slot_status

    return read_slot_status(bootstrap, app, slot, last_n=last_n)


def healthy_now(bootstrap: str, app_name: str, slot_name: str, history: Sequence[StatusRecord]) -> Check:
    """The health DAG's rules (heartbeat age, progress, batch time, budgets) on this slot now."""
    from baton.apps import load_app
    from baton.caps import compute_cap
    from baton.health import HealthPolicy, assess, healthy_check
    from baton.kafka.control_log import read_control
    from baton.kafka.markers import read_last_marker
    from baton.kafka.tail import end_offsets
    from baton.records import Slot

    app, slot = load_app(app_name), Slot(slot_name)
    record = read_control(bootstrap, app.name)
    spec = record.slots.get(slot) if record else None
    marker = read_last_marker(bootstrap, app.commits_topic, app.name)
    end = end_offsets(bootstrap, app.input.topic, range(app.input.partitions))
    now_ms, policy = int(time.time() * 1000), HealthPolicy.from_app(app)
    health = assess(
        app,
        slot,
        spec,
        history,
        end,
        None,
        now_ms,
        policy,
        cap=compute_cap(record, slot, marker, app.input.partitions),
        started_ms=spec.started_ms if spec and spec.started_ms else None,
    )
    return healthy_check(health, now_ms, policy)


class SlotRunningTrigger(SlotWaitTrigger):
    """The process launched at or after `since_ms` (and with `pid`, if given) reports RUNNING."""

    kind = "running"

    def __init__(self, *, since_ms: int = 0, pid: int | None = None, **common: Any):
        super().__init__(**common)
        self.since_ms, self.pid = int(since_ms), (int(pid) if pid is not None else None)

    def args(self) -> dict[str, Any]:
        return dict(since_ms=self.since_ms, pid=self.pid)

    def check(self) -> Check:
        from baton.conditions import slot_running

        return slot_running(slot_history(self.bootstrap, self.app, self.slot), self.since_ms, self.pid)


class PositionReachedTrigger(SlotWaitTrigger):
    """The slot processed at least `target` ({partition: offset}) on every partition."""

    kind = "position"

    def __init__(self, *, target: dict[Any, int], since_ms: int = 0, **common: Any):
        super().__init__(**common)
        self.target, self.since_ms = positions(target), int(since_ms)

    def args(self) -> dict[str, Any]:
        return dict(target=positions_arg(self.target), since_ms=self.since_ms)

    def check(self) -> Check:
        from baton.conditions import position_reached

        return position_reached(slot_history(self.bootstrap, self.app, self.slot), self.target, self.since_ms)


class WarmUpTrigger(SlotWaitTrigger):
    """The warm-up gate: the slot (a standby) within `max_lag` records and `max_lag_s` seconds of input
    of what the active has emitted, beyond what the app's standby pace holds it back by
    (baton.conditions.following); only its status records since `since_ms` count."""

    kind = "warm-up"

    def __init__(self, *, max_lag: int, max_lag_s: float | None = None, since_ms: int = 0, **common: Any):
        super().__init__(**common)
        self.max_lag, self.since_ms = int(max_lag), int(since_ms)
        self.max_lag_s = float(max_lag_s) if max_lag_s is not None else None

    def args(self) -> dict[str, Any]:
        return dict(max_lag=self.max_lag, max_lag_s=self.max_lag_s, since_ms=self.since_ms)

    def check(self) -> Check:
        from baton import conditions
        from baton.apps import load_app
        from baton.kafka.markers import read_last_marker
        from baton.records import Slot

        app = load_app(self.app)
        history = slot_history(self.bootstrap, self.app, self.slot)
        marker = read_last_marker(self.bootstrap, app.commits_topic, app.name)
        active = slot_history(self.bootstrap, self.app, Slot(self.slot).other.value, last_n=200)
        return conditions.following(
            history,
            marker,
            conditions.arrival_rate(active),
            self.max_lag,
            self.max_lag_s,
            app.standby_pace_ms / 1000,
            self.since_ms,
        )


class InvariantsAnswerTrigger(SlotWaitTrigger):
    """The slot (a reprocess's new generation, the standby) answered the invariant check `asked` from a
    launch of `generation` (baton.invariants.answer_check)."""

    kind = "invariant check"

    def __init__(self, *, asked: str, generation: int, **common: Any):
        super().__init__(**common)
        self.asked, self.generation = str(asked), int(generation)

    def args(self) -> dict[str, Any]:
        return dict(asked=self.asked, generation=self.generation)

    def check(self) -> Check:
        from baton.invariants import answer_check

        return answer_check(
            slot_history(self.bootstrap, self.app, self.slot, last_n=500),
            self.asked,
            self.generation,
            int(time.time() * 1000),
        )


class SlotHealthyTrigger(SlotWaitTrigger):
    """The slot passes the health DAG's rules now (healthy_now)."""

    kind = "healthy"

    def check(self) -> Check:
        return healthy_now(self.bootstrap, self.app, self.slot, slot_history(self.bootstrap, self.app, self.slot))
