"""SlotHealthyTrigger on the real broker: a slot that reports RUNNING now passes,
one whose last record is old does not; a slot that reported a failure fails the gate at once."""

import time

import pytest
from confluent_kafka import Producer

from baton.kafka.admin import delete_topics
from baton.kafka.control_log import write_control
from baton.records import ControlRecord, Role, Slot, SlotSpec, SlotState, StatusRecord
from baton.settings import STATUS_TOPIC
from baton_airflow.triggers.status import SlotHealthyTrigger
from tests.support.slots import make_app

pytestmark = pytest.mark.integration


def publish(bootstrap, rec):
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(STATUS_TOPIC, rec.to_bytes(), rec.key())
    p.flush(10)


@pytest.mark.parametrize(
    "age_s, state, met, failed",
    [(0, SlotState.RUNNING, True, False), (600, SlotState.RUNNING, False, False), (0, SlotState.FAILED, False, True)],
)
def test_healthy_gate(bootstrap, tmp_path, monkeypatch, age_s, state, met, failed):
    app, _ = make_app(bootstrap, tmp_path)
    monkeypatch.setenv("BATON_APPS_DIR", str(tmp_path))
    now_ms = int(time.time() * 1000)
    try:
        write_control(
            bootstrap,
            ControlRecord(
                app=app.name,
                revision=1,
                epoch=1,
                active=Slot.BLUE,
                slots={Slot.BLUE: SlotSpec(SlotState.RUNNING, "v1", started_ms=now_ms - 700_000)},
            ),
        )
        publish(
            bootstrap,
            StatusRecord(
                app=app.name,
                slot=Slot.BLUE,
                state=state,
                role=Role.ACTIVE,
                epoch_seen=1,
                version="v1",
                batch_id=3,
                processed={0: 0, 1: 0},
                emitted={0: 0, 1: 0},
                ts_ms=now_ms - age_s * 1000,
            ),
        )
        check = SlotHealthyTrigger(app=app.name, slot="blue", bootstrap=bootstrap).check()
        assert (check.met, check.failed) == (met, failed), check.message
    finally:
        delete_topics(bootstrap, [t.name for t in app.topics()])
