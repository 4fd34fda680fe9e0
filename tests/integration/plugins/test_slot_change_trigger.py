"""SlotChangeTrigger on the real broker: stand-in slots (real processes of this host) renew leases; a
kill -9 of one is reported within seconds, its restart once it runs, and a watch with nothing to
report ends quiet at its deadline. A trigger reports every app's changes: a test keeps its own app's."""

import asyncio
import signal
import subprocess
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer

from baton.kafka.admin import TopicSpec, ensure_topics
from baton.leases import Lease, proc_start_ticks, this_host
from baton.records import Role, Slot, SlotState
from baton.settings import LEASES_TOPIC, LEASES_TOPIC_CONFIG
from baton_airflow.triggers.slot_changes import SlotChangeTrigger

pytestmark = pytest.mark.integration


class StandIn:
    """A process of this host renewing a slot's lease every 200 ms from a thread of the test."""

    def __init__(self, bootstrap, app, slot, launch, state=SlotState.RUNNING):
        self.app, self.slot, self.launch, self.state = app, slot, launch, state
        self.proc = subprocess.Popen(["sleep", "300"])
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self.stop = threading.Event()
        self.seq = 0
        self.thread = threading.Thread(target=self._renew, daemon=True)
        self.thread.start()

    def _renew(self):
        start = proc_start_ticks(self.proc.pid)
        while not self.stop.is_set():
            self.seq += 1
            lease = Lease(
                app=self.app,
                slot=self.slot,
                launch=self.launch,
                host=this_host(),
                pid=self.proc.pid,
                pid_start=start,
                state=self.state,
                role=Role.ACTIVE if self.slot is Slot.BLUE else Role.STANDBY,
                epoch_seen=1,
                seq=self.seq,
                ts_ms=int(time.time() * 1000),
                ttl_ms=4000,
                interval_ms=200,
            )
            self.producer.produce(LEASES_TOPIC, lease.to_bytes(), lease.key())
            self.producer.poll(0)
            self.stop.wait(0.2)
        self.producer.flush(5)

    def kill(self):
        """kill -9: the process and its renewals end at once (no released lease)."""
        self.stop.set()
        self.thread.join(5)
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(5)

    def close(self):
        if self.proc.poll() is None:
            self.kill()


async def first_event(trigger, timeout_s):
    async def take():
        async for event in trigger.run():
            return event.payload

    return await asyncio.wait_for(take(), timeout_s)


def changes_of(bootstrap, app, act, timeout_s=60):
    """Run watches (as baton_watch's runs do, one after another) until one reports `app`'s changes; `act`
    runs once the first watch has read its look-back (the live stand-ins are its baseline)."""

    async def watch():
        deadline, pending = time.monotonic() + timeout_s, act
        while time.monotonic() < deadline:
            trigger = SlotChangeTrigger(bootstrap=bootstrap, timeout_s=max(1.0, deadline - time.monotonic()))
            task = asyncio.ensure_future(first_event(trigger, timeout_s + 10))
            if pending is not None:
                await asyncio.sleep(3)
                await asyncio.to_thread(pending)
                pending = None
            event = await task
            mine = [c for c in event["changes"] if c["app"] == app]
            if mine or event["status"] == "quiet":
                return event["status"], mine
        return "quiet", []

    return asyncio.run(watch())


@pytest.fixture
def app_name(bootstrap):
    ensure_topics(bootstrap, [TopicSpec(LEASES_TOPIC, 1, LEASES_TOPIC_CONFIG)])
    return f"watch-{uuid.uuid4().hex[:8]}"


def test_a_kill_is_reported_within_seconds_and_the_restart_once_it_runs(bootstrap, app_name):
    blue = StandIn(bootstrap, app_name, Slot.BLUE, "blue-1")
    green = StandIn(bootstrap, app_name, Slot.GREEN, "green-1")
    restarted = None
    try:
        time.sleep(1)
        killed_at = []

        def kill_blue():
            killed_at.append(time.monotonic())
            blue.kill()

        status, changes = changes_of(bootstrap, app_name, kill_blue)
        assert status == "met" and [(c["slot"], c["kind"], c["launch"]) for c in changes] == [
            ("blue", "died", "blue-1")
        ]
        assert "is gone" in changes[0]["why"]
        assert time.monotonic() - killed_at[0] < 15  # seconds, not baton_health's minute

        # The restart: a new launch, restoring first; reported once it runs.
        restarted = StandIn(bootstrap, app_name, Slot.BLUE, "blue-2", state=SlotState.RESTORING)

        def runs():
            time.sleep(1)
            restarted.state = SlotState.RUNNING

        status, changes = changes_of(bootstrap, app_name, runs)
        assert status == "met" and [(c["slot"], c["kind"], c["launch"]) for c in changes] == [("blue", "up", "blue-2")]
    finally:
        for s in (blue, green, restarted):
            if s is not None:
                s.close()


def test_a_watch_with_nothing_to_report_ends_quiet_at_its_deadline(bootstrap, app_name):
    blue = StandIn(bootstrap, app_name, Slot.BLUE, "blue-1")
    try:
        time.sleep(1)
        started = time.monotonic()
        trigger = SlotChangeTrigger(bootstrap=bootstrap, timeout_s=4)
        event = asyncio.run(first_event(trigger, 30))
        assert event["status"] == "quiet" and "in 4 s" in event["message"]
        assert not [c for c in event["changes"] if c["app"] == app_name]
        # The deadline is wall-clock (it survives the triggerer's restart): judged on that clock, since
        # this host's clock can be stepped while the test runs (CI once saw 3.2 monotonic s for 4).
        assert time.time() >= trigger.deadline_ts
        assert time.monotonic() - started < 20
    finally:
        blue.close()
