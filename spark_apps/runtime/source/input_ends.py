"""The input's end, read in the background for the slot's status records (lag at each batch).

Spark reports a source's latest offset only for a source that is not a simple reader, and the
driver-side reader (readOn=driver) is one; so the harness asks the broker itself, every 5 s, off the
batch path: a ListOffsets per partition and a fetch of at most the last batch (Tansu reports a lower
bound: baton.kafka.tail.probe_ends reads on to the true end). The status records of the next 1.5 s
carry it: the Baton page plots one point per 10 s. Once a second cost Tansu 0.03-0.05 cores for two
slots at the seed's rate (A/B in bench/HISTORY.md); every 5 s, a fifth of that.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

from confluent_kafka import Consumer, KafkaException, TopicPartition

from baton.kafka.client_config import kafka_config
from baton.kafka.fetch_wait import fetch_wait_ms
from baton.kafka.tail import probe_ends

log = logging.getLogger(__name__)

FETCH_WAIT_MS = 10
# Long enough for a stalled probe to lengthen its wait (baton.kafka.fetch_wait.STALL_S) on Tansu.
PROBE_TIMEOUT_S = 2.0


class InputEnds(threading.Thread):
    def __init__(self, bootstrap: str, topic: str, partitions: int, interval_s: float = 5.0, fresh_s: float = 1.5):
        super().__init__(name="baton-input-ends", daemon=True)
        self.topic, self.partitions, self.interval_s, self.fresh_s = topic, partitions, interval_s, fresh_s
        self._read_at = 0.0
        self.bootstrap = bootstrap
        self.fetch_wait = 0
        self.consumer = self._consumer()
        self._latest: dict[int, int] | None = None
        self._halt = threading.Event()

    def _consumer(self) -> Consumer:
        self.fetch_wait = fetch_wait_ms(self.bootstrap, self.topic, FETCH_WAIT_MS)
        return Consumer(
            kafka_config(
                self.bootstrap,
                {
                    "group.id": f"baton-ends-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "enable.partition.eof": True,
                    "fetch.wait.max.ms": self.fetch_wait,
                },
            )
        )

    def latest(self) -> dict[int, int] | None:
        """The end read within the last fresh_s, else None: an older end, beside a newer batch's
        position, would show a backlog smaller than it is (so some status records carry none)."""
        return self._latest if time.monotonic() - self._read_at <= self.fresh_s else None

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                try:
                    if fetch_wait_ms(self.bootstrap, self.topic, FETCH_WAIT_MS) != self.fetch_wait:
                        self.consumer.close()  # a probe stalled: Tansu needs a longer wait (baton.kafka.fetch_wait)
                        self.consumer = self._consumer()
                    bound = {
                        p: self.consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=2)[1]
                        for p in range(self.partitions)
                    }
                    self._latest = probe_ends(
                        self.consumer, self.topic, bound, PROBE_TIMEOUT_S, self.bootstrap, self.fetch_wait
                    )[0]
                    self._read_at = time.monotonic()
                except KafkaException as exc:  # the broker away for a moment: the last end stands
                    log.debug("input end not read: %s", exc)
                self._halt.wait(self.interval_s)
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self._halt.set()
