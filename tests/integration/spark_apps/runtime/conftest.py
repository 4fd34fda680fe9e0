"""An app with both slots desired RUNNING and blue active at epoch 1, its topics removed afterwards."""

import pytest

from baton.kafka.admin import delete_topics
from baton.kafka.control_log import write_control
from baton.records import ControlRecord, Slot, SlotSpec, SlotState
from tests.support.slots import make_app


@pytest.fixture
def both_slots_app(bootstrap, tmp_path):
    app, path = make_app(bootstrap, tmp_path)
    both = {s: SlotSpec(SlotState.RUNNING, "v1") for s in Slot}
    write_control(bootstrap, ControlRecord(app=app.name, revision=1, epoch=1, active=Slot.BLUE, slots=both))
    yield app, path
    delete_topics(bootstrap, [t.name for t in app.topics()])
