"""The driver-side reader's buffer: a batch takes records up to each partition's limit and the batch's
budget, what lies past a limit waits for the limit to move, ends follow the consumer past markers, and a
batch that starts elsewhere has its partition sought."""

import threading
import time

from spark_apps.runtime.source import prefetch
from spark_apps.runtime.source.prefetch import PartitionBuffer, Prefetcher, Stamp, aligned_limits


def buffer_with(good, dead=(), start=0, next_offset=None):
    b = PartitionBuffer(start, start, 1)
    b.append(
        list(good),
        [[f"r{o}" for o in good]],
        [(o, None, b"x", "bad") for o in dead],
        next_offset if next_offset is not None else max([*good, *dead, start - 1]) + 1,
    )
    return b


def test_take_stops_at_the_limit_and_keeps_the_rest_for_the_next_batch():
    b = buffer_with([0, 1, 2, 3, 4])
    t = b.take(3, 100)
    assert (t.start, t.end, t.offsets, t.columns) == (0, 3, [0, 1, 2], [["r0", "r1", "r2"]])
    t = b.take(float("inf"), 100)
    assert (t.start, t.end, t.offsets) == (3, 5, [3, 4])


def test_the_budget_cuts_in_offset_order_across_good_and_dead_records():
    b = buffer_with([0, 2, 3, 5], dead=[1, 4])
    t = b.take(float("inf"), 3)
    assert (t.offsets, [d[0] for d in t.dead], t.end) == ([0, 2], [1], 3)
    t = b.take(float("inf"), 10)
    assert (t.offsets, [d[0] for d in t.dead], t.start, t.end) == ([3, 5], [4], 3, 6)


def test_the_end_moves_past_markers_but_never_past_the_limit_or_back():
    b = buffer_with([0, 1], next_offset=4)  # offsets 2 and 3: transaction markers
    assert b.take(3, 10).end == 3
    assert b.take(float("inf"), 10).end == 4
    assert b.take(2, 10).end == 4  # a cap below the position holds the partition where it is


def stamped(start, times, at_end=False):
    """A buffer of records start, start+1, ... written at `times` (ms), each fetched on its own."""
    b = PartitionBuffer(start, start, 1, at_end=at_end)
    for o, t in enumerate(times, start):
        b.append([o], [[o]], [], o + 1, Stamp(o, t, t))
    return b


def test_a_batch_knows_its_oldest_and_newest_records_times_from_the_chunks_it_took_from():
    b = PartitionBuffer(0, 0, 1)
    for first, last, t0 in ((0, 4, 1000), (5, 9, 1200), (10, 14, 1400)):  # three fetched chunks
        offs = list(range(first, last + 1))
        b.append(offs, [list(offs)], [], last + 1, Stamp(first, t0, t0 + 100))
    t = b.take(7, 100)  # records 0..6: chunks one and two
    assert (t.oldest_ms, t.newest_ms) == (1000, 1300)
    assert [st.offset for st in b.stamps] == [5, 10]  # the first chunk is wholly taken
    t = b.take(float("inf"), 100)  # records 7..14: from inside the second chunk to the third
    assert (t.oldest_ms, t.newest_ms) == (1200, 1500)
    assert b.take(float("inf"), 100).oldest_ms is None  # nothing taken, no times


def test_records_without_timestamps_leave_the_times_unknown():
    b = buffer_with([0, 1, 2])  # appended without a stamp
    t = b.take(float("inf"), 10)
    assert (t.oldest_ms, t.newest_ms) == (None, None)


INF = float("inf")


def test_catching_up_partitions_move_abreast_in_time():
    fast = stamped(0, [1000 + 100 * i for i in range(100)])  # fetched up to 10,900 ms of writes
    slow = stamped(500, [1000 + 100 * i for i in range(20)])  # only up to 2,900 ms so far
    done = stamped(50, [900, 9500], at_end=True)  # read to its end: holds nobody back
    got = aligned_limits({0: fast, 1: slow, 2: done}, {0: INF, 1: INF, 2: INF})
    # Every partition up to the slow one's newest record (2,900 ms) + the slack (1 s).
    assert got == {0: 30, 1: 520, 2: 51}
    # A partition behind its limit only owes up to it: at its limit it holds nobody back.
    assert aligned_limits({0: fast, 1: slow}, {0: INF, 1: 520}) == {0: 100, 1: 520}  # all fast has
    # Every partition at its end: no hold.
    limits = {0: INF, 1: INF}
    ends = {0: stamped(0, [1, 2], at_end=True), 1: stamped(0, [5], at_end=True)}
    assert aligned_limits(ends, limits) is limits
    # Steady state: a partition whose end is on its way, a few ms behind another, holds nothing back.
    assert aligned_limits({0: stamped(0, [5000, 5040]), 1: stamped(0, [5010], at_end=True)}, limits) == {0: 2, 1: 1}
    # One behind with nothing ready: the others wait where they are (ALIGN_MAX_HOLD_S bounds that).
    assert aligned_limits({0: fast, 1: PartitionBuffer(7, 7, 1)}, limits) == {0: 0, 1: 7}
    # Records without timestamps (-1) cannot be aligned: nothing is held.
    blind = {0: stamped(0, [-1] * 5), 1: stamped(0, [-1] * 3)}
    assert aligned_limits(blind, limits) == {0: 5, 1: 3}


def test_a_steady_state_that_holds_nothing_back_is_never_a_hold(monkeypatch, caplog):
    """A tailing partition whose end is on its way is behind, but none of its records are held: such
    takes must not add up to ALIGN_MAX_HOLD_S (which warned, then dropped the alignment for real holds)."""
    monkeypatch.setattr(prefetch, "ALIGN_MAX_HOLD_S", 0.0)
    pf = object.__new__(Prefetcher)
    pf.topic, pf._seeks, pf._held_since = "t", {}, None
    pf.buffers = {0: stamped(0, [5000, 5040]), 1: stamped(0, [5010], at_end=True)}
    limits = {0: INF, 1: INF}
    for _take in range(3):
        assert pf._aligned({0: 0, 1: 0}, limits) == limits
    assert pf._held_since is None and "abreast" not in caplog.text
    # A real hold still times out: partition 1 behind at 2,900 ms, partition 0 has records up to 10,900 ms.
    pf.buffers = {
        0: stamped(0, [1000 + 100 * i for i in range(100)]),
        1: stamped(500, [1000 + 100 * i for i in range(20)]),
    }
    assert pf._aligned({0: 0, 1: 500}, limits) == {0: 30, 1: 520}
    time.sleep(0.01)
    assert pf._aligned({0: 0, 1: 500}, limits) == limits and "abreast" in caplog.text


def test_without_an_event_time_watermark_a_batch_takes_every_partition_s_ready_records():
    """alignPartitions=false: a partition behind with nothing ready holds no other (with alignment it
    holds them all where they are, and the batch takes nothing)."""
    pf = object.__new__(Prefetcher)
    pf.topic, pf._seeks, pf._held_since, pf._lock, pf._error = "t", {}, None, threading.Lock(), None
    buffers = lambda: {0: stamped(0, [5000, 5040, 5080]), 1: PartitionBuffer(7, 7, 1)}  # noqa: E731
    pf.buffers, pf.align = buffers(), True
    assert {p: t.offsets for p, t in pf.take({0: 0, 1: 7}, {0: INF, 1: INF}, None).items()} == {0: [], 1: []}
    pf.buffers, pf.align = buffers(), False
    assert {p: t.offsets for p, t in pf.take({0: 0, 1: 7}, {0: INF, 1: INF}, None).items()} == {0: [0, 1, 2], 1: []}


class FakeMessage:
    def __init__(self, p, o):
        self.p, self.o = p, o

    def error(self):
        return None

    def timestamp(self):
        return 1, 1_000_000 + self.o  # TIMESTAMP_CREATE_TIME

    def partition(self):
        return self.p

    def offset(self):
        return self.o


class FakeEOF:
    """librdkafka's word that the consumer reached a partition's end (enable.partition.eof)."""

    def __init__(self, p):
        self.p = p

    def error(self):
        from confluent_kafka import KafkaError

        return KafkaError(KafkaError._PARTITION_EOF)

    def partition(self):
        return self.p


class FakeConsumer:
    """Partitions of a topic as lists of offsets; consume() hands out what follows each position."""

    def __init__(self, logs):
        self.logs, self.pos, self.paused, self.seeks = logs, {}, set(), []
        self.eof_at: dict[int, int] = {}  # where each partition's end was last reported
        self.lock = threading.Lock()

    def assign(self, tps):
        self.pos.update({tp.partition: tp.offset for tp in tps})

    incremental_assign = assign

    def seek(self, tp):
        with self.lock:
            self.seeks.append((tp.partition, tp.offset))
            self.pos[tp.partition] = tp.offset
            self.eof_at.pop(tp.partition, None)  # librdkafka reports the end again after a seek (both brokers)

    def pause(self, tps):
        self.paused |= {tp.partition for tp in tps}

    def resume(self, tps):
        self.paused -= {tp.partition for tp in tps}

    def consume(self, n, timeout):
        n = min(n, 5)  # a fetch's worth
        with self.lock:
            out = []
            for p, at in sorted(self.pos.items()):
                if p in self.paused:
                    continue
                for o in self.logs[p]:
                    if o >= at and len(out) < n:
                        out.append(FakeMessage(p, o))
                        self.pos[p] = o + 1
                end = self.logs[p][-1] + 1 if self.logs[p] else 0
                if self.pos[p] >= end and self.eof_at.get(p) != self.pos[p]:
                    out.append(FakeEOF(p))
                    self.eof_at[p] = self.pos[p]
        if not out:
            time.sleep(timeout)
        return out

    def get_watermark_offsets(self, tp, cached=False):  # the ends fetch responses carried
        log = self.logs[tp.partition]
        return (log[0], log[-1] + 1) if log else (-1001, -1001)

    def position(self, tps):
        from confluent_kafka import TopicPartition

        return [TopicPartition(tp.topic, tp.partition, self.pos[tp.partition]) for tp in tps]

    def close(self):
        pass


def decode(msgs):
    offs = [m.offset() for m in msgs]
    return offs, [[f"r{o}" for o in offs]], []


def wait_ready(pf, begin, want):
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with pf._lock:
            if all(len(pf.buffers[p]) >= n for p, n in want.items()):
                return
        time.sleep(0.01)
    raise AssertionError(f"prefetch did not buffer {want}")


def test_a_batch_takes_within_limits_and_budget_and_a_moved_start_is_sought():
    consumer = FakeConsumer({0: list(range(10)), 1: list(range(20, 26))})
    pf = Prefetcher(lambda: consumer, "t", {0: 0, 1: 20}, 1, decode, max_buffered=1000)
    try:
        wait_ready(pf, {0: 0, 1: 20}, {0: 10, 1: 6})
        taken = pf.take({0: 0, 1: 20}, {0: 4, 1: float("inf")}, None)
        assert (taken[0].offsets, taken[0].end) == ([0, 1, 2, 3], 4)
        assert (taken[1].offsets, taken[1].end) == (list(range(20, 26)), 26)
        assert (taken[1].oldest_ms, taken[1].newest_ms) == (1_000_020, 1_000_025)  # the records' timestamps
        # A budget of 4 split by what each has ready within its limit: 6 and 0 -> 4 from partition 0.
        taken = pf.take({0: 4, 1: 26}, {0: float("inf"), 1: float("inf")}, 4)
        assert (taken[0].offsets, taken[0].end, taken[1].end) == ([4, 5, 6, 7], 8, 26)
        # The engine replays from 2: the partition is sought and gives nothing to this batch.
        taken = pf.take({0: 2, 1: 26}, {}, None)
        assert 0 not in taken
        wait_ready(pf, {0: 2}, {0: 8})
        assert consumer.seeks == [(0, 2)]
        assert pf.take({0: 2, 1: 26}, {}, None)[0].offsets == list(range(2, 10))
    finally:
        pf.close()


def test_a_partition_stops_fetching_once_its_buffer_is_full():
    consumer = FakeConsumer({0: list(range(50))})
    pf = Prefetcher(lambda: consumer, "t", {0: 0}, 1, decode, max_buffered=10)
    try:
        wait_ready(pf, {0: 0}, {0: 10})
        time.sleep(0.2)
        assert 0 in consumer.paused and len(pf.buffers[0]) <= 15  # the limit, plus the fetch that crossed it
        pf.take({0: 0}, {}, None)
        wait_ready(pf, {0: 0}, {0: 10})
    finally:
        pf.close()


def test_a_backlog_larger_than_the_buffer_is_read_to_its_target_in_several_batches():
    """AvailableNow with a target beyond what the buffer holds: the wait ends when the buffer is full (its
    fetching paused until a batch takes), not at its timeout; each batch takes what is buffered."""
    consumer = FakeConsumer({0: list(range(50)), 1: list(range(100, 130))})
    pf = Prefetcher(lambda: consumer, "t", {0: 0, 1: 100}, 1, decode, max_buffered=10)
    try:
        begin, target, got = {0: 0, 1: 100}, {0: 50, 1: 130}, {0: [], 1: []}
        for _batch in range(20):
            if begin == target:
                break
            assert pf.wait_until({p: target[p] for p in begin}, None, 5.0)  # False: its timeout ran out
            taken = pf.take(begin, {p: float(target[p]) for p in begin}, None)
            for p, t in taken.items():
                got[p].extend(t.offsets)
                begin[p] = t.end
        assert got == {0: list(range(50)), 1: list(range(100, 130))}
    finally:
        pf.close()


class FakeError:
    def __init__(self, code):
        self._code = code

    def code(self):
        return self._code

    def fatal(self):
        return False

    def retriable(self):
        return False


class ErrorMessage(FakeMessage):
    def __init__(self, p, o, code):
        super().__init__(p, o)
        self._err = FakeError(code)

    def error(self):
        return self._err


class KafkaOutOfRange(FakeConsumer):
    """Apache Kafka's answer to a position past a partition's end: one OFFSET_OUT_OF_RANGE error (via
    librdkafka's auto.offset.reset=error), then nothing more for that partition."""

    def consume(self, n, timeout):
        from confluent_kafka import KafkaError

        with self.lock:
            self.__dict__.setdefault("told", set())
            for p, at in self.pos.items():
                if p not in self.told and at > (max(self.logs[p]) + 1 if self.logs[p] else 0):
                    self.told.add(p)
                    return [ErrorMessage(p, at, KafkaError._AUTO_OFFSET_RESET)]
        return super().consume(n, timeout)


def test_a_position_the_broker_does_not_hold_is_reported_not_fatal():
    """The planner asks where the query stands (input_check.py) instead of the thread dying with a bare
    librdkafka error; the other partitions read on."""
    consumer = KafkaOutOfRange({0: list(range(10)), 1: list(range(5))})
    pf = Prefetcher(lambda: consumer, "t", {0: 0, 1: 40}, 1, decode, max_buffered=1000)
    try:
        wait_ready(pf, {0: 0}, {0: 10})
        deadline = time.monotonic() + 5
        while not pf.out_of_range() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pf.out_of_range() == {1: 40}
        assert pf.take({0: 0, 1: 40}, {}, None)[0].offsets == list(range(10))  # no error raised
    finally:
        pf.close()


def test_a_slot_that_stops_following_swaps_to_a_consumer_that_fetches_at_once_where_the_buffers_end():
    """Paced while following; on pace(False) the thread assigns the other consumer at each buffer's end
    and closes the paced one: every record is taken once, in order, across the swap."""
    logs = {0: list(range(10)), 1: list(range(100, 104))}
    at_once, paced = FakeConsumer(logs), FakeConsumer(logs)
    closed = []
    paced.close = lambda: closed.append("paced")
    pf = Prefetcher(
        lambda: at_once,
        "t",
        {0: 0, 1: 100},
        1,
        decode,
        max_buffered=1000,
        make_paced_consumer=lambda: paced,
        paced=True,
    )
    try:
        wait_ready(pf, {0: 0, 1: 100}, {0: 10, 1: 4})
        assert at_once.pos == {} and paced.pos == {0: 10, 1: 104}  # only the paced one was used
        first = pf.take({0: 0, 1: 100}, {0: 6, 1: float("inf")}, None)  # a cap: 0..5 of partition 0
        logs[0].extend(range(10, 15))  # written while the slot still follows
        pf.pace(False)
        deadline = time.monotonic() + 5
        while pf._paced and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not pf._paced and closed == ["paced"]
        wait_ready(pf, {0: 6}, {0: 9})  # 6..9 buffered before the swap, 10..14 fetched after it
        rest = pf.take({0: first[0].end, 1: first[1].end}, {}, None)
        assert first[0].offsets + rest[0].offsets == list(range(15))
        assert first[1].offsets + rest[1].offsets == list(range(100, 104))
        assert at_once.pos == {0: 15, 1: 104}  # assigned where the buffers ended, then read on
    finally:
        pf.close()


def test_without_a_paced_consumer_pace_changes_nothing():
    consumer = FakeConsumer({0: list(range(5))})
    pf = Prefetcher(lambda: consumer, "t", {0: 0}, 1, decode, max_buffered=1000, paced=True)
    try:
        pf.pace(True)
        wait_ready(pf, {0: 0}, {0: 5})
        assert not pf._paced and consumer.seeks == []
    finally:
        pf.close()


def wait_for(predicate, what, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_in_the_quiet_time_a_partition_fetches_to_its_end_then_nothing_until_the_window_opens():
    """An active tailing its input (module docstring, "Fetching in a window"): a partition short of its end
    reads on through the quiet time; one at its end is paused until the quiet time is over."""
    logs = {0: list(range(40)), 1: list(range(100, 103))}
    consumer = FakeConsumer(logs)
    pf = Prefetcher(lambda: consumer, "t", {0: 0, 1: 100}, 1, decode, max_buffered=1000)
    try:
        pf.quiet(time.monotonic() + 60)
        wait_ready(pf, {0: 0, 1: 100}, {0: 40, 1: 3})  # the backlog is read although it is quiet
        wait_for(lambda: consumer.paused == {0, 1}, "both partitions paused at their ends")
        first = pf.take({0: 0, 1: 100}, {}, None)
        with consumer.lock:
            logs[0].extend(range(40, 45))
            logs[1].extend(range(103, 110))
        time.sleep(0.2)
        assert len(pf.buffers[0]) == len(pf.buffers[1]) == 0  # written in the quiet time: not fetched
        pf.quiet(time.monotonic() + 0.2)  # the next batch's window opens in 0.2 s
        wait_ready(pf, {0: 40, 1: 103}, {0: 5, 1: 7})
        wait_for(lambda: not consumer.paused, "resumed")
        rest = pf.take({0: 40, 1: 103}, {}, None)
        assert first[0].offsets + rest[0].offsets == list(range(45))
        assert first[1].offsets + rest[1].offsets == list(range(100, 110))
    finally:
        pf.close()


class SilentPartitionConsumer(FakeConsumer):
    """A consumer whose fetches of some partitions bring nothing, not even their end (an answer that is late)."""

    def __init__(self, logs, silent):
        super().__init__(logs)
        self.silent = silent

    def consume(self, n, timeout):
        return [m for m in super().consume(n, timeout) if m.partition() not in self.silent]


def test_a_look_learns_whether_every_partition_resumed_by_its_window_had_answered_and_when():
    """The planner's WindowLead needs, at each look, whether the window's first answers were in (records or
    the partition's end) and how long after the window opened the last came."""
    logs = {0: list(range(5)), 1: list(range(100, 103))}
    consumer = SilentPartitionConsumer(logs, silent=set())
    pf = Prefetcher(lambda: consumer, "t", {0: 0, 1: 100}, 1, decode, max_buffered=1000)
    try:
        assert pf.window_report() is None  # no window has opened
        pf.quiet(time.monotonic() + 60)
        wait_ready(pf, {0: 0, 1: 100}, {0: 5, 1: 3})
        wait_for(lambda: consumer.paused == {0, 1}, "both partitions paused at their ends")
        pf.take({0: 0, 1: 100}, {}, None)
        with consumer.lock:
            logs[0].extend(range(5, 9))  # partition 1 gets nothing: its end is its answer
        opened = time.monotonic()
        pf.quiet(opened + 0.1)
        wait_ready(pf, {0: 5, 1: 103}, {0: 4})
        wait_for(lambda: pf._window is not None and len(pf._window.answered) == 2, "both answered")
        report = pf.window_report()
        assert report.answered and 0 <= report.delay_s < time.monotonic() - opened
        assert pf.window_report() is None  # reported once

        pf.take({0: 5, 1: 103}, {}, None)
        pf.quiet(time.monotonic() + 60)
        wait_for(lambda: consumer.paused == {0, 1}, "paused again")
        consumer.silent = {1}  # from now on partition 1's fetches bring no answer
        with consumer.lock:
            logs[0].extend(range(9, 12))
            logs[1].extend(range(103, 106))
        pf.quiet(time.monotonic() + 0.1)
        wait_ready(pf, {0: 9, 1: 103}, {0: 3})
        time.sleep(0.2)
        report = pf.window_report()
        assert not report.answered and report.delay_s >= 0.15  # the look waited at least this long for it
    finally:
        pf.close()


class NoEOFConsumer(FakeConsumer):
    """A paced consumer under steady writes: librdkafka reports a partition's end only for a fetch that brought
    nothing, and one that waits after each fetch with records always finds more."""

    def consume(self, n, timeout):
        return [m for m in super().consume(n, timeout) if not isinstance(m, FakeEOF)]


def test_a_paced_consumer_counts_a_partition_at_its_end_by_the_watermark_its_fetches_reported():
    """A standby fetching in windows before its cap moves (pace_hint.py): without an end reported, no partition
    would ever count as at its end, and none would pause in the quiet time."""
    logs = {0: list(range(6)), 1: list(range(100, 104))}
    paced = NoEOFConsumer(logs)
    pf = Prefetcher(
        lambda: FakeConsumer(logs),
        "t",
        {0: 0, 1: 100},
        1,
        decode,
        max_buffered=1000,
        make_paced_consumer=lambda: paced,
        paced=True,
    )
    try:
        pf.quiet(time.monotonic() + 60)
        wait_ready(pf, {0: 0, 1: 100}, {0: 6, 1: 4})
        wait_for(lambda: paced.paused == {0, 1}, "both partitions paused at the watermarks' ends")
        assert pf.buffers[0].caught_up and pf.buffers[1].at_end
        first = pf.take({0: 0, 1: 100}, {}, None)
        with paced.lock:
            logs[0].extend(range(6, 9))
        time.sleep(0.2)
        assert len(pf.buffers[0]) == 0  # written in the quiet time: not fetched
        pf.quiet(time.monotonic() + 0.1)
        wait_ready(pf, {0: 6}, {0: 3})
        rest = pf.take({0: 6, 1: 104}, {}, None)
        assert first[0].offsets + rest[0].offsets == list(range(9))
    finally:
        pf.close()
