"""The waits' triggers: each serialises to its own arguments and comes back the same from them (a
triggerer restart re-creates it so, deadline included); a passed state check position is asked again
further ahead at once (a retry would find the same position passed); a long wait logs where it stands."""

import asyncio

import pytest

import baton.control_plane
import baton.handoff
import baton_airflow.hooks.control
from baton.conditions import Check
from baton.control_plane import ControlPlane
from baton.records import Role, Slot, SlotState, StateDigest, StatusRecord
from baton.upgrade import ask_state_check
from baton_airflow.triggers import base as trigger_base
from baton_airflow.triggers.base import SlotWaitTrigger
from baton_airflow.triggers.cutover import CutoverTrigger
from baton_airflow.triggers.status import (
    InvariantsAnswerTrigger,
    PositionReachedTrigger,
    SlotHealthyTrigger,
    SlotRunningTrigger,
    WarmUpTrigger,
)
from baton_airflow.triggers.upgrade import MAX_STATE_CHECK_MOVES, RestoreTrigger, SettleTrigger, StateCheckTrigger
from tests.support.fakes import MemoryControlStore

P1, P2, P3 = {0: 100, 1: 100}, {0: 500, 1: 500}, {0: 900, 1: 900}


def missed_at(position, slot=Slot.BLUE):
    digest = StateDigest(at="missed", batch_id=-1, rows=0, digest="", schema="", position=dict(position))
    return StatusRecord(
        app="click_counts",
        slot=slot,
        state=SlotState.RUNNING,
        role=Role.ACTIVE,
        epoch_seen=1,
        batch_id=5,
        processed={0: 200, 1: 200},
        state_digest=digest,
        ts_ms=1_000,
    )


@pytest.fixture
def world(monkeypatch):
    store = MemoryControlStore()
    plane = ControlPlane(store, writer="test")
    plane.move_slot("click_counts", Slot.BLUE, SlotState.STARTING, version="v1")
    plane.update("click_counts", ask_state_check(P1))
    active: list[StatusRecord] = [missed_at(P1)]
    planned = []

    def plan_ahead(read_active, input_end, partitions, ahead_s, **_):
        planned.append(ahead_s)
        return dict(P2) if len(planned) == 1 else {p: o + 100 * len(planned) for p, o in P2.items()}

    def read_status(bootstrap, app, slot=None, last_n=5000):
        return list(active) if Slot(slot) is Slot.BLUE else []

    monkeypatch.setattr(baton.control_plane, "KafkaControlStore", lambda bootstrap: store)
    monkeypatch.setattr(baton.handoff, "plan_ahead", plan_ahead)
    monkeypatch.setattr(baton_airflow.hooks.control, "read_slot_status", read_status)
    return plane, active, planned


def states_trigger(target=P1):
    return StateCheckTrigger(
        app="click_counts",
        slot="green",
        bootstrap="unused:1",
        target={str(p): o for p, o in target.items()},
        ahead_s=2.0,
        writer="test",
    )


def test_a_passed_check_position_is_asked_again_further_ahead_in_place(world):
    plane, active, planned = world
    trigger = states_trigger()
    check = trigger.check()
    assert check.waiting and "asked again at {0: 500, 1: 500}" in check.message
    assert plane.current("click_counts").check_at == P2
    assert trigger.target == P2 and trigger.serialize()[1]["moves"] == 1
    assert trigger.serialize()[1]["target"] == {"0": 500, "1": 500}
    assert planned == [4.0]  # twice the step's 2 s
    # The active passes P2 too: asked again, twice as far again; then the trigger gives up with the reason.
    for _ in range(1, MAX_STATE_CHECK_MOVES):
        active.append(missed_at(trigger.target))
        assert trigger.check().waiting
    assert planned == [4.0, 8.0, 16.0]
    active.append(missed_at(trigger.target))
    failed = trigger.check()
    assert failed.failed and f"after {MAX_STATE_CHECK_MOVES} moves" in failed.message


def test_a_re_created_trigger_adopts_the_position_asked_meanwhile(world):
    """A triggerer restart re-creates the trigger with its first target: it must not move the check again
    from a position that is no longer the one asked for."""
    plane, active, planned = world
    plane.update("click_counts", ask_state_check(P3))  # a try before this one moved it already
    trigger = states_trigger(P1)
    assert trigger.check().waiting
    assert plane.current("click_counts").check_at == P3 and trigger.target == P3


class Log:
    def __init__(self):
        self.lines = []

    def info(self, msg, *args):
        self.lines.append(msg % args)


def test_a_long_wait_logs_where_it_stands(monkeypatch):
    checks = iter(
        [
            Check(message="40000 records behind"),
            Check(message="20000 records behind"),
            Check(met=True, message="within"),
        ]
    )
    monkeypatch.setattr(WarmUpTrigger, "check", lambda self: next(checks))
    monkeypatch.setattr(trigger_base, "PROGRESS_EVERY_S", 0.0)
    trigger = WarmUpTrigger(app="click_counts", slot="green", bootstrap="unused:1", max_lag=1000, poll_s=0.0)
    log = Log()
    monkeypatch.setattr(WarmUpTrigger, "log", log, raising=False)

    async def first_event():
        async for event in trigger.run():
            return event

    event = asyncio.run(first_event())
    assert event.payload["status"] == "met"
    waits = [line for line in log.lines if "waiting" in line]
    assert len(waits) == 2 and "40000 records behind" in waits[0] and "s left" in waits[0]
    assert event.payload["message"].startswith("click_counts/green warm-up: ")


COMMON = dict(app="click_counts", slot="green", bootstrap="b:9092", timeout_s=30.0, poll_s=0.5)
EVERY_WAIT = [
    SlotRunningTrigger(since_ms=5, pid=42, **COMMON),
    PositionReachedTrigger(target={0: 10, "1": 20}, **COMMON),
    WarmUpTrigger(max_lag=50_000, max_lag_s=2.5, since_ms=7, **COMMON),
    SlotHealthyTrigger(**COMMON),
    InvariantsAnswerTrigger(asked="manual__1:2", generation=3, **COMMON),
    RestoreTrigger(since_ms=9, expected={"rows": 3}, **COMMON),
    StateCheckTrigger(target={0: 1}, policy="exact", ahead_s=3.0, moves=1, writer="dag:run", **COMMON),
    SettleTrigger(
        since_ms=1, epoch=4, fence={0: 5}, settle_s=30, max_batch_ms=2000, correct=True, record_cost_us=72, **COMMON
    ),
    CutoverTrigger(fence={0: 5, 1: 6}, epoch=3, trail_records=100, correct=False, writer="dag:run", **COMMON),
]


@pytest.mark.parametrize("trigger", EVERY_WAIT, ids=lambda t: type(t).__name__)
def test_a_trigger_comes_back_the_same_from_what_it_serialised(trigger):
    """What crosses to the triggerer: plain values (JSON), the absolute deadline, this wait's own
    arguments and no other's; the class re-created from them serialises the same."""
    import importlib
    import json

    path, kwargs = trigger.serialize()
    assert json.loads(json.dumps(kwargs)) == kwargs
    module, name = path.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    assert cls is type(trigger) and issubclass(cls, SlotWaitTrigger)
    again = cls(**json.loads(json.dumps(kwargs)))
    assert again.serialize() == (path, kwargs)
    assert kwargs["deadline_ts"] == trigger.deadline_ts
    with pytest.raises(TypeError):  # one wait's arguments are not another's
        cls(**kwargs, condition="states")


def test_positions_cross_as_strings_and_come_back_as_partitions():
    trigger = CutoverTrigger(fence={"0": 5, "1": 6}, epoch=3, writer="w", **COMMON)
    assert trigger.fence == {0: 5, 1: 6} and trigger.serialize()[1]["fence"] == {"0": 5, "1": 6}
