"""An app with blue active at epoch 1 (alone, or with both slots desired RUNNING), its topics removed afterwards."""

import pytest

from baton.kafka.admin import delete_topics
from baton.kafka.control_log import write_control
from baton.records import ControlRecord, Slot, SlotSpec, SlotState
from tests.support.slots import make_app

LATE_POSITION_APP = "tests.support.late_position_app"


def app_with_slots(bootstrap, tmp_path, slots, **kw):
    app, path = make_app(bootstrap, tmp_path, **kw)
    desired = {s: SlotSpec(SlotState.RUNNING, "v1") for s in slots}
    write_control(bootstrap, ControlRecord(app=app.name, revision=1, epoch=1, active=Slot.BLUE, slots=desired))
    yield app, path
    delete_topics(bootstrap, [t.name for t in app.topics()])


@pytest.fixture
def both_slots_app(bootstrap, tmp_path):
    yield from app_with_slots(bootstrap, tmp_path, Slot)


@pytest.fixture
def blue_app(bootstrap, tmp_path):
    yield from app_with_slots(bootstrap, tmp_path, [Slot.BLUE])


@pytest.fixture
def late_position_app(bootstrap, tmp_path):
    """Both slots of click_counts with the test fault tests.support.late_position in each slot."""
    yield from app_with_slots(bootstrap, tmp_path, Slot, module=LATE_POSITION_APP)
