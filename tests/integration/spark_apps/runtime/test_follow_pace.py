"""A following slot's source fetches paced and goes back to fetching at once when its cap goes, on the
real broker through the driver-side reader's own consumers (prefetch.py, "Paced fetching"): every record
is read once across the swap. (What pacing saves the broker is measured in bench/throughput.py.)"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer

from spark_apps.runtime.source.kafka_driver_reader import DriverStreamReader
from spark_apps.runtime.source.source_options import parse_options

pytestmark = pytest.mark.integration


def produce(bootstrap, topic, first, n, partitions=2):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(first, first + n):
        p.produce(topic, key=f"k{i}".encode(), value=json.dumps({"i": i}).encode(), partition=i % partitions)
    assert p.flush(30) == 0


def read_to(reader, start, want, timeout_s=30.0):
    """Batches from `start` until the positions reach `want`; returns the positions and the offsets read."""
    got: dict[int, list[int]] = {}
    deadline = time.monotonic() + timeout_s
    while start != want:
        assert time.monotonic() < deadline, f"read to {start}, not {want}"
        batches, end = reader.read(start)
        for b in batches:
            rows = b.to_pydict()
            for p, o in zip(rows["partition"], rows["offset"]):
                got.setdefault(p, []).append(o)
        start = end
        time.sleep(0.05)
    return start, got


def test_a_following_reader_fetches_paced_then_at_once_without_losing_or_repeating_a_record(
    bootstrap, topics, tmp_path
):
    t = topics(f=2)["f"]
    produce(bootstrap, t, 0, 200)
    cap = tmp_path / "cap.json"
    cap.write_text(json.dumps({"0": 60, "1": 70}))
    reader = DriverStreamReader(
        parse_options(
            {
                "kafka.bootstrap.servers": bootstrap,
                "topic": t,
                "readOn": "driver",
                "startingOffsets": "earliest",
                "capFile": str(cap),
            }
        )
    )
    try:
        start, got = read_to(reader, reader.initialOffset(), {"0": 60, "1": 70})
        assert reader._prefetch._paced  # a cap: the slot follows
        cap.unlink()  # the slot stops following (a takeover)
        produce(bootstrap, t, 200, 100)
        start, more = read_to(reader, start, {"0": 150, "1": 150})
        assert not reader._prefetch._paced
        for p in (0, 1):
            assert got[p] + more[p] == list(range(150)), p
    finally:
        reader.stop()
