"""A standby whose cap the follower paces fetches in a window before the cap moves next (pace_hint.py), on the
real broker through the driver-side reader's paced consumer: while records are written throughout, its
partitions are paused between windows (the paced consumer seldom hears a partition's end: prefetch.py counts
it by the watermark its fetches reported), each batch after a move reaches the new cap from what the window
had buffered, and every record is read once, in order. (What it saves the broker: bench/HISTORY.md.)"""

from __future__ import annotations

import threading
import time

import pytest

from spark_apps.runtime.coordination.follower import write_cap_file
from spark_apps.runtime.source.kafka_driver_reader import DriverStreamReader
from spark_apps.runtime.source.pace_hint import write_pace_hint
from spark_apps.runtime.source.source_options import parse_options
from tests.support.steady_writer import produce_steadily

pytestmark = pytest.mark.integration

PACE_S = 1.5


def test_a_paced_standby_fetches_in_a_window_before_its_cap_moves_and_reads_every_record_once(
    bootstrap, topics, tmp_path
):
    t = topics(s=2)["s"]
    n, per_s = 12000, 1000
    produced = [0]  # records handed to the producer so far
    stop = threading.Event()
    cap_file = tmp_path / "cap.json"
    moves: list[tuple[float, dict[int, int]]] = []  # (when, cap) as the follower would write them

    def move_cap(count: int, paced: bool) -> None:
        cap = {0: (count + 1) // 2, 1: count // 2}  # record i went to partition i % 2
        if not paced:
            write_pace_hint(cap_file, None)
        write_cap_file(cap_file, cap)
        if paced:
            write_pace_hint(cap_file, time.time() + PACE_S)
        moves.append((time.monotonic(), cap))

    move_cap(0, paced=True)
    reader = DriverStreamReader(
        parse_options(
            {
                "kafka.bootstrap.servers": bootstrap,
                "topic": t,
                "readOn": "driver",
                "startingOffsets": "earliest",
                "minBatchIntervalMs": "1000",
                "capFile": str(cap_file),
            }
        )
    )
    writer = threading.Thread(target=produce_steadily, args=(bootstrap, t, n, per_s, stop, produced))
    got: dict[int, list[int]] = {0: [], 1: []}
    reached: list[float] = []  # per move while writing: seconds until the reader stood at the new cap
    paused_seen = 0
    start = reader.initialOffset()
    writer.start()
    next_move, behind = time.monotonic() + PACE_S, 0
    waiting_for: tuple[float, dict[int, int]] | None = None  # a move while writing the reader has not reached yet
    try:
        deadline = time.monotonic() + 90
        while sum(map(len, got.values())) < n:
            assert time.monotonic() < deadline, f"read {sum(map(len, got.values()))} of {n} records"
            now = time.monotonic()
            if now >= next_move:
                # The active's position: what was written a pace ago (it has surely reached the broker).
                writing = writer.is_alive()
                move_cap(behind if writing else n, paced=writing)
                behind, next_move = produced[0], now + PACE_S
                waiting_for = moves[-1] if writing and len(moves) > 3 else None  # the first moves warm up
            batches, start = reader.read(start)
            for b in batches:
                rows = b.to_pydict()
                for p, o in zip(rows["partition"], rows["offset"]):
                    got[p].append(o)
            if waiting_for is not None and all(len(got[p]) >= o for p, o in waiting_for[1].items()):
                reached.append(time.monotonic() - waiting_for[0])
                waiting_for = None
            if reader._prefetch is not None and writer.is_alive() and reader._prefetch._paused == {0, 1}:
                paused_seen += 1  # records are being written, yet the consumer fetches nothing
            time.sleep(0.1)  # the query's tick
    finally:
        stop.set()
        writer.join(30)
        reader.stop()
    # Between the windows of several moves, every partition paused (without counting a partition's end by
    # its watermark, none ever was here: the paced consumer heard no end).
    assert paused_seen >= 10, paused_seen
    for p in (0, 1):
        assert got[p] == list(range((n + 1 - p) // 2)), p
    # The batch after each move took the records up to the new cap from what its window had buffered: no
    # fetch after the move was needed (that takes the paced consumer 0.1-0.3 s on the embedded broker).
    reached.sort()
    assert len(reached) >= 2 and reached[len(reached) // 2] < 0.3, reached
