"""An active tailing its input fetches in a window before each batch (prefetch.py, "Fetching in a window"),
on the real broker through the driver-side reader's own consumer: while records are written throughout,
its partitions are paused between windows, and every record is read once, in order, across the pauses.
(What the windows save the broker is measured in bench/throughput.py.)"""

from __future__ import annotations

import threading
import time

import pytest

from spark_apps.runtime.source.kafka_driver_reader import DriverStreamReader
from spark_apps.runtime.source.source_options import parse_options
from tests.support.steady_writer import produce_steadily

pytestmark = pytest.mark.integration


def test_a_tailing_reader_pauses_between_windows_and_reads_every_record_once(bootstrap, topics):
    t = topics(w=2)["w"]
    n = 3000
    stop = threading.Event()
    writer = threading.Thread(target=produce_steadily, args=(bootstrap, t, n, 1000, stop))
    reader = DriverStreamReader(
        parse_options(
            {
                "kafka.bootstrap.servers": bootstrap,
                "topic": t,
                "readOn": "driver",
                "startingOffsets": "earliest",
                "minBatchIntervalMs": "700",
            }
        )
    )
    got: dict[int, list[int]] = {0: [], 1: []}
    paused_seen = 0
    ages = []  # per look while records are written: how old the batch's newest record was (s)
    start = reader.initialOffset()
    writer.start()
    try:
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < n:
            assert time.monotonic() < deadline, f"read {sum(map(len, got.values()))} of {n} records"
            looked = reader._pacer._looked_at
            batches, start = reader.read(start)
            newest = 0.0
            for b in batches:
                rows = b.to_pydict()
                for p, o in zip(rows["partition"], rows["offset"]):
                    got[p].append(o)
                newest = max([newest] + [t.timestamp() for t in rows["timestamp"]])
            if reader._pacer._looked_at != looked and writer.is_alive() and sum(map(len, got.values())) > 200:
                ages.append(time.time() - newest if newest else float("inf"))  # a look, in steady writing
            if reader._prefetch is not None and writer.is_alive() and reader._prefetch._paused:
                paused_seen += 1  # records are being written, yet the consumer fetches nothing there
            time.sleep(0.1)  # the query's tick
    finally:
        stop.set()
        writer.join(30)
        reader.stop()
    assert paused_seen >= 3  # between the windows of several batches
    for p in (0, 1):
        assert got[p] == list(range(n // 2)), p
    # Each look took what had been written until shortly before it: the window's fetches came back in time
    # (a partition resumed without its seek waited for librdkafka's next wake-up, up to a second).
    ages.sort()
    assert len(ages) >= 3 and ages[len(ages) // 2] < 0.25, ages
