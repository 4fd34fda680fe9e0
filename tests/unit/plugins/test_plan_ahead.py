"""A position planned ahead of the input (a fence, a state check position) is ahead by what arrives in
`ahead_s` at the input's measured arrival rate, not at the rate the active last read at."""

from baton.apps import AppDefinition, TopicRef
from baton.records import ControlRecord, Role, Slot, SlotState, StatusRecord
from baton_airflow.operators.handoff import plan_ahead


class Control:
    def __init__(self, ends, read_rate):
        self.ends = list(ends)
        self.read_rate = read_rate

    def status(self, app, slot):
        return [StatusRecord(app=app, slot=slot, state=SlotState.RUNNING, role=Role.ACTIVE, epoch_seen=1,
                             batch_id=9, processed={0: 900, 1: 900}, input_rate=self.read_rate)]

    def input_end(self, app):
        return self.ends.pop(0)


def test_a_catching_up_active_does_not_push_the_position_far_ahead():
    app = AppDefinition(name="a", module="m", version="v1", input=TopicRef(topic="in", partitions=2),
                        output=TopicRef(topic="out", partitions=2))
    rec = ControlRecord(app="a", revision=1, epoch=1, active=Slot.BLUE)
    now = [0.0]
    # 1,000 records arrived in the 1 s window; the active, working through a backlog, read 50,000/s.
    control = Control([{0: 1_000, 1: 1_000}, {0: 1_500, 1: 1_500}], read_rate=50_000.0)
    sleep = lambda s: now.__setitem__(0, now[0] + s)  # noqa: E731
    position = plan_ahead(control, app, rec, ahead_s=2.0, sleep=sleep, clock=lambda: now[0])
    assert position == {0: 1_500 + 1_000, 1: 1_500 + 1_000}  # 2 s at 1,000/s, split over 2 partitions
    idle = Control([{0: 1_500, 1: 1_500}, {0: 1_500, 1: 1_500}], read_rate=50_000.0)
    assert plan_ahead(idle, app, rec, ahead_s=2.0, sleep=sleep, clock=lambda: now[0]) == {0: 1_500, 1: 1_500}
