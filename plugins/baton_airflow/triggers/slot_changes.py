"""The baton_watch DAG's wait: read every app's leases until a slot dies or a restarted one comes up
(baton.slot_changes), then resume the task, which runs baton_health at once.

One consumer for the trigger's life, reading the leases topic from a look-back (the last renewals of
every slot: the baseline) and then as it grows; the host is asked only whether a lease's process still
exists (/proc). Nothing is written: a second run of the trigger (a triggerer restart) reads again and,
at worst, has baton_health run once more. A broker that does not answer is waited for: the renewals
stop alike (nobody is judged silent) and the deadline still ends the wait.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from baton.kafka.client_config import use_file
from baton.kafka.messages import offset_of
from baton.leases import LOOK_BACK_RECORDS
from baton.records import Slot
from baton_airflow.triggers.base import PROGRESS_EVERY_S, security_file

if TYPE_CHECKING:
    from confluent_kafka import Consumer

# How long the look-back may take before the watch begins with what it read.
LOOK_BACK_S = 10.0
# A poll's wait for renewals (the consumer's own fetch waits on the broker; this bounds one call).
POLL_S = 0.5
# Renewals come every second: a longer fetch wait than the slots' own lease readers costs the idle
# broker less (Tansu charges each idle fetch) and delays a report by at most this.
FETCH_WAIT_MS = 250


class SlotChangeTrigger(BaseTrigger):
    """Met with the changes (a list of baton.slot_changes.SlotChange dicts) when any slot of any app died
    or came up; "quiet" at the deadline (`timeout_s` from the first creation, absolute)."""

    def __init__(
        self,
        *,
        bootstrap: str,
        timeout_s: float = 3600.0,
        deadline_ts: float | None = None,
        client_config_file: str | None = None,
    ):
        super().__init__()
        self.bootstrap, self.timeout_s = bootstrap, float(timeout_s)
        self.deadline_ts = float(deadline_ts) if deadline_ts is not None else time.time() + self.timeout_s
        self.client_config_file = client_config_file if client_config_file is not None else security_file(bootstrap)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            dict(
                bootstrap=self.bootstrap,
                timeout_s=self.timeout_s,
                deadline_ts=self.deadline_ts,
                client_config_file=self.client_config_file,
            ),
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        use_file(self.bootstrap, self.client_config_file or None)
        reader = LeaseReader(self.bootstrap)
        try:
            begun = False
            logged_at = time.monotonic()
            while True:
                if not begun:
                    begun = await asyncio.to_thread(reader.look_back)
                else:
                    changes = await asyncio.to_thread(reader.poll)
                    if changes:
                        self.log.info("baton watch: %s", "; ".join(c.message() for c in changes))
                        yield TriggerEvent(
                            {
                                "status": "met",
                                "changes": [c.to_dict() for c in changes],
                                "message": "; ".join(c.message() for c in changes),
                            }
                        )
                        return
                if time.monotonic() - logged_at >= 10 * PROGRESS_EVERY_S:
                    logged_at = time.monotonic()
                    self.log.info(
                        "baton watch: %d slot(s) renewing, none died; %.0f s left",
                        reader.slots(),
                        max(0.0, self.deadline_ts - time.time()),
                    )
                if time.time() >= self.deadline_ts:
                    yield TriggerEvent(
                        {
                            "status": "quiet",
                            "changes": [],
                            "message": f"no slot died or came up in {self.timeout_s:.0f} s",
                        }
                    )
                    return
        finally:
            await asyncio.to_thread(reader.close)


class LeaseReader:
    """The leases topic into a SlotChangeWatch, through one consumer (blocking calls: run in a thread)."""

    def __init__(self, bootstrap: str):
        from baton.leases import proc_start_ticks, this_host
        from baton.slot_changes import SlotChangeWatch

        self.bootstrap = bootstrap
        self.watch = SlotChangeWatch(this_host(), proc_start_ticks)
        self._consumer: Consumer | None = None
        self._end = 0  # the topic's end when the look-back began
        self._position = 0  # the next offset to read
        self._look_back_until = 0.0

    def _open(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        from baton.kafka.client_config import kafka_config
        from baton.kafka.fetch_wait import fetch_wait_ms
        from baton.settings import LEASES_TOPIC

        consumer = Consumer(
            kafka_config(
                self.bootstrap,
                {
                    "group.id": "baton-watch",
                    "enable.auto.commit": False,
                    "reconnect.backoff.max.ms": 1000,
                    "fetch.wait.max.ms": fetch_wait_ms(self.bootstrap, LEASES_TOPIC, FETCH_WAIT_MS),
                },
            )
        )
        try:
            self._end = consumer.get_watermark_offsets(TopicPartition(LEASES_TOPIC, 0), timeout=5)[1]
        except Exception:
            consumer.close()
            raise
        self._position = max(0, self._end - LOOK_BACK_RECORDS)
        consumer.assign([TopicPartition(LEASES_TOPIC, 0, self._position)])
        self._consumer, self._look_back_until = consumer, time.monotonic() + LOOK_BACK_S

    def look_back(self) -> bool:
        """Read the last renewals up to the topic's end at the start; True once they are the baseline.
        A missing topic or a broker not answering: False (asked again)."""
        if self._consumer is None:
            try:
                self._open()
            except Exception:  # no leases topic yet, or the broker is not answering: ask again
                time.sleep(POLL_S)
                return False
        self._read()
        if self._position >= self._end or time.monotonic() >= self._look_back_until:
            self.watch.begin(self._awaiting_check())
            return True
        return False

    def _awaiting_check(self):
        """Of the slots that came up lately, those the control plane still has desired STARTING (read once
        per watch, for their apps only)."""
        from baton.kafka.control_log import read_control
        from baton.records import SlotState

        awaiting, recent = set(), self.watch.recently_up()
        for app in sorted({app for app, _ in recent}):
            try:
                record = read_control(self.bootstrap, app)
            except Exception:  # the broker did not answer: the scheduled check will see it
                continue
            for slot in Slot:
                spec = record.slots.get(slot) if record is not None else None
                if (app, slot) in recent and spec is not None and spec.desired is SlotState.STARTING:
                    awaiting.add((app, slot))
        return awaiting

    def poll(self):
        self._read()
        return self.watch.changes()

    def slots(self) -> int:
        return sum(not lease.released for lease in self.watch.newest.values())

    def _read(self) -> None:
        from baton.leases import Lease
        from baton.records import RecordError

        assert self._consumer is not None  # read once look_back opened it
        for msg in self._consumer.consume(num_messages=500, timeout=POLL_S):
            if msg.error() is not None:
                continue  # end of partition, a transient error: the consumer goes on
            self._position = offset_of(msg) + 1
            try:
                self.watch.observe(Lease.from_bytes(msg.value()))
            except (RecordError, TypeError):
                continue  # a malformed renewal is skipped, never fatal

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
