"""A producer writing numbered JSON records steadily, alternating two partitions (record i to partition i % 2),
for tests of a tailing or following reader while records keep coming."""

from __future__ import annotations

import json
import threading
import time

from confluent_kafka import Producer


def produce_steadily(
    bootstrap: str, topic: str, n: int, per_s: float, stop: threading.Event, produced: list[int] | None = None
) -> None:
    """Write records 0..n-1 at about `per_s` a second until `stop`; `produced[0]` counts those handed over."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        if stop.is_set():
            break
        p.produce(topic, key=f"k{i}".encode(), value=json.dumps({"i": i}).encode(), partition=i % 2)
        p.poll(0)
        if produced is not None:
            produced[0] = i + 1
        time.sleep(1 / per_s)
    assert p.flush(30) == 0
