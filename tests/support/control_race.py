"""A control-log writer in a process of its own, as each of a mapped start's task processes is: every
round it waits for the others at a barrier, then moves its slot with a new ControlWriter (a fresh
producer: initialised just before its write, as in a new task process). Run through multiprocessing's
spawn context (a fork would copy the parent's Kafka clients' threads)."""

from __future__ import annotations

import random
import time

from baton.control_plane import ControlPlane, KafkaControlStore
from baton.kafka.control_log import ControlWriter, WriteConflict
from baton.records import Slot, SlotState

CYCLE = (SlotState.STOPPING, SlotState.STOPPED, SlotState.STARTING, SlotState.RUNNING)


class WriterStore(KafkaControlStore):
    """A control store with a ControlWriter of its own: a writer as in another process (write_control
    shares one per app in a process)."""

    def __init__(self, bootstrap: str, topic: str, app: str):
        super().__init__(bootstrap, topic)
        self.writer = ControlWriter(bootstrap, app)

    def append(self, rec):
        return self.writer.write(rec, self.topic)


def move_in_rounds(bootstrap: str, topic: str, app: str, slot: str, rounds: int, barrier, results) -> None:
    """Each round: the barrier, up to 0.5 s of jitter (one writer reaching its init while the other commits), one move of `slot` (retried on a lost
    compare-and-set). Puts (slot, slowest move in seconds, error or None) on `results`."""
    slowest, error = 0.0, None
    try:
        for i in range(rounds):
            barrier.wait(120)
            time.sleep(random.uniform(0, 0.5))
            store = WriterStore(bootstrap, topic, app)
            plane = ControlPlane(store, writer=slot)
            t0 = time.monotonic()
            for _attempt in range(40):
                try:
                    plane.move_slot(app, Slot(slot), CYCLE[i % len(CYCLE)], reason=f"round {i}")
                    break
                except WriteConflict:
                    continue
            else:
                raise AssertionError(f"{slot}: round {i} lost 40 x 5 compare-and-sets")
            slowest = max(slowest, time.monotonic() - t0)
            store.writer.close()
    except Exception as exc:  # noqa: BLE001 - reported to the test
        error = f"{type(exc).__name__}: {exc}"
        barrier.abort()
    results.put((slot, slowest, error))
