"""Baton's Kafka source read on the driver (option readOn=driver): one long-lived consumer, no task.

Spark runs a streaming Python source's reads as tasks, each in a Python worker; on this project's
2-core machine a read task cost ~100 ms of wall time whatever its size (the worker round trip), four
a batch, one per partition. As a SimpleDataSourceStreamReader the source instead reads in Spark's
driver-side source process: a thread fetches and decodes continuously (spark_apps.runtime.source.prefetch),
and when Spark asks for the next batch's end the reader takes what is ready and hands it to the JVM
with the batch's plan; the batch's scan is then a JVM task over those rows. One process reads every
partition: right for the rates of a slot that fits one machine's state (a Python process decodes
~1M events/s); readOn=executors (the default) spreads the read over tasks for more.

A batch:
1. starts where the previous one ended (a different start, e.g. after a failed batch, is sought);
2. takes every partition's records up to its limit: the cap file (fences, follow mode) and, under
   Trigger.AvailableNow, the ends at the query's start; maxRecordsPerTrigger bounds the whole batch;
3. becomes Arrow batches (raw records, or the declared fields with each partition's dead letters
   written to the spool for its range, spark_apps.runtime.sink.dead_letters).
A batch Spark replays after a restart is re-read between its offsets (readBetweenOffsets, in a task,
exactly as readOn=executors reads), so it holds the same records.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql.datasource import SimpleDataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from spark_apps.runtime.coordination.applied_cap import AppliedCap
from spark_apps.runtime.source.batch_times import BatchTimes, BatchTimesFile
from spark_apps.runtime.source.input_check import WAY_OUT, InputDataLoss
from spark_apps.runtime.source.kafka_stream_reader import KafkaStreamReader
from spark_apps.runtime.source.pace_hint import read_pace_hint
from spark_apps.runtime.source.prefetch import Prefetcher, Taken
from spark_apps.runtime.source.source_columns import (
    dead_columns,
    decode_records,
    decoded_record_batch,
    raw_columns,
    raw_record_batch,
)
from spark_apps.runtime.source.source_options import SourceOptions
from spark_apps.runtime.source.source_plan import (
    BatchPacer,
    KafkaInputPartition,
    offsets_from_json,
    offsets_to_json,
    read_cap,
)
from spark_apps.runtime.source.window_lead import WindowLead

# Rows a partition's buffer holds before its fetching pauses (memory: ~100 bytes a decoded row).
MAX_BUFFERED = 1_000_000
# How long the first read after a start waits for the consumer to reach the partitions' ends (under
# steady writes an end may never be seen: then the first batch takes what arrived meanwhile).
FIRST_READ_WAIT_S = 1.0
# Reads in a row that met an out-of-range position although the positions checked out (a broker answering
# wrong, or one moving under the query): then the query fails with what the broker said.
MAX_OUT_OF_RANGE = 3
# How often a running reader asks for its topic's id (one DescribeTopics, never on a batch's path when the
# broker answers): a topic recreated under a running query (a broker that restarted empty) is otherwise
# silent on Tansu, whose fetch beyond the end answers nothing, and undetectable by offsets once the new
# topic has grown past them.
IDENTITY_EVERY_S = 10.0
IDENTITY_TIMEOUT_S = 2.0
# A following slot's consumer waits this long after a fetch that brought records (prefetch.py, "Paced
# fetching"). Measured on the embedded broker (4 partitions of 5,000 batches, 20,085 events/s, readers with
# the prefetcher's settings): two readers fetching at once cost it 0.70-0.92 cores (12-17 fetches a second
# each), one of them paced 0.26-0.35 (250, 500 or 1,000 ms alike; 4, 2 and 1 fetches a second). Well inside
# the active's 1 s trigger, by which a standby's cap trails the broker.
FOLLOW_FETCH_PACE_MS = 250
# A paced fetch brings up to this much of each partition: a standby's backlog (a restart, a catch-up)
# still comes at over 100k records/s, above what the reader decodes.
FOLLOW_PARTITION_FETCH_BYTES = 4 * 1024 * 1024
# An active that tails its input fetches in a window at least this long before its next batch can start
# (prefetch.py, "Fetching in a window"), and a partition that has reached its end fetches nothing before it.
# The window's first fetch (what was written since the batch before: ~20k records at the seed's rate and a
# 1 s trigger) is buffered in ~20-50 ms on a fast host; the rest of the window covers a busy host's
# scheduling. A longer trigger interval gathers more to fetch and decode in the window: it is at least this
# share of the interval. Where the first answers come later, the lead grows (window_lead.py) up to the
# ceiling's share of the interval.
TAIL_FETCH_LEAD_S = 0.25
TAIL_FETCH_LEAD_SHARE = 0.25
TAIL_FETCH_LEAD_CEILING_SHARE = 0.5
# A standby whose cap the follower paces (pace_hint.py) fetches in a window this long before the cap moves
# next, and a partition that has reached its end fetches nothing before it. What the move lets it read
# ends where the active's last batch looked, which was before that batch ran and committed (~0.5 s at the
# seed's rate), and the paced consumer's first answer in the window comes ~0.1-0.25 s after it opens
# (the seek, Tansu holding a fetch half its wait): records fetched earlier would only wait in the buffer,
# and records the window misses are taken at the standby's next look, a trigger later.
FOLLOW_WINDOW_LEAD_S = 0.5

log = logging.getLogger(__name__)


def broker_silent(exc: BaseException) -> bool:
    """A metadata or offsets query that failed because the broker did not answer (paused, restarting,
    unreachable): the next trigger asks again. Anything else (a missing topic, data loss) is an answer."""
    from confluent_kafka import KafkaError, KafkaException

    from baton.kafka.tail import is_fatal

    return (
        isinstance(exc, KafkaException)
        and bool(exc.args)
        and isinstance(exc.args[0], KafkaError)
        and not is_fatal(exc.args[0])
    )


class DriverStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions):
        self.opts = options
        self.planner = KafkaStreamReader(options)  # initial offsets, metadata, watermarks, replays
        self._prefetch: Prefetcher | None = None
        self._target: dict[int, int] | None = None  # Trigger.AvailableNow bound
        self._pacer = BatchPacer(options.min_batch_interval_s, options.cap_file)
        self._applied = AppliedCap(options.cap_file) if options.cap_file else None
        interval = self._pacer.interval_s
        self._lead = WindowLead(
            max(TAIL_FETCH_LEAD_S, TAIL_FETCH_LEAD_SHARE * interval), TAIL_FETCH_LEAD_CEILING_SHARE * interval
        )
        self._out_of_range = 0  # reads in a row that met an out-of-range position
        self.identity_every_s = IDENTITY_EVERY_S
        self._identity_at = time.monotonic()
        self._times = BatchTimesFile(options.batch_times_file) if options.batch_times_file else None
        self._silent_since: float | None = None  # the broker has not answered the reads since then

    def __getstate__(self):  # shipped to executors for replays: never a client or a thread
        state = self.__dict__.copy()
        state["_prefetch"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)

    # -- SimpleDataSourceStreamReader
    def initialOffset(self) -> dict:
        return self.planner.initialOffset()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.planner.available_ends(self.planner._partition_ids())

    def read(self, start: dict) -> tuple[Iterator[Any], dict]:
        """The next batch: see the module's docstring. A broker that does not answer makes it empty (the
        query goes on, its next trigger asks again) instead of failing the query: a broker paused for
        15 s failed the standby's query, and its slot, in CI."""
        try:
            batch = self._read(start)
        except Exception as exc:
            if not broker_silent(exc):
                raise
            now = time.monotonic()
            self._silent_since = self._silent_since or now
            log.warning(
                "baton-kafka: %s: the broker has not answered for %.0f s (%s): no batch until it does",
                self.opts.topic,
                now - self._silent_since,
                exc,
            )
            return iter(()), start
        self._silent_since = None
        return batch

    def _read(self, start: dict) -> tuple[Iterator[Any], dict]:
        if self._target is None and self._pacer.hold():
            return iter(()), start
        begin = offsets_from_json(start)
        if self._prefetch is not None and (gone := self._prefetch.out_of_range()):
            # The broker said a position is not in the log (Apache Kafka; librdkafka then fetches nothing
            # more there): check again where the query stands, as at a restart, with a fresh consumer.
            self._out_of_range += 1
            self._prefetch.close()
            self._prefetch, self.planner.verified = None, False
            if self._out_of_range > MAX_OUT_OF_RANGE:
                raise InputDataLoss(
                    f"input data loss on topic {self.opts.topic!r}: the broker keeps answering "
                    f"offset out of range at {gone} (partition: offset) while the query stands at "
                    f"{begin}. {WAY_OUT}."
                )
        if self._prefetch is not None and self._identity_due() and self.planner.identity_changed(IDENTITY_TIMEOUT_S):
            self._prefetch.close()  # the topic was recreated under the query: check where it stands
            self._prefetch, self.planner.verified = None, False
        if not self.planner.verified and (jump := self.planner.resume_point(begin)) is not None:
            return iter(()), offsets_to_json(jump)
        if self.planner.cap_is_stale():
            return iter(()), start
        parts = self.planner._partition_ids()
        for p in parts:
            if p not in begin:  # a partition added since the query started: read it from its start
                lows, _ = self.planner._watermarks([p])
                begin[p] = lows[p]
        limits, following = self._limits(parts)
        fresh = self._prefetch is None
        prefetch = self._prefetcher(begin, following)
        prefetch.pace(following)
        if self._target is not None:
            # AvailableNow: every read waits for the query's end offsets (a read that found nothing
            # yet would end the query).
            want = {p: min(self._target.get(p, begin[p]), limits[p]) for p in parts}
            if not prefetch.wait_until(want, self.opts.max_records, self.opts.poll_timeout_s):
                raise TimeoutError(
                    f"{self.opts.topic}: records up to {want} not fetched within {self.opts.poll_timeout_s:.0f}s"
                )
        elif fresh:
            # The first read waits (briefly) until the consumer reached each partition's end, so a
            # restarted slot's first batch takes the backlog instead of costing a trigger.
            prefetch.wait_until(None, self.opts.max_records, FIRST_READ_WAIT_S, limits)
        taken = prefetch.take(begin, limits, self.opts.max_records)
        if (report := prefetch.window_report()) is not None and not following:
            self._lead.note(report.answered, report.delay_s, self.opts.topic)
        prefetch.quiet(self._quiet_until(following))
        end = {p: taken[p].end if p in taken else o for p, o in begin.items()}
        if end == begin:
            return iter(()), start
        self._out_of_range = 0
        self._note_times(taken, end)
        batches = []
        for p in sorted(taken):
            if taken[p].end > taken[p].start:
                batches.extend(self._batches(p, taken[p]))
        return iter(batches), offsets_to_json(end)

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[Any]:
        """A batch Spark replays after a restart (in a task): checked first, since it was planned on input
        that may be gone (KafkaStreamReader.replay_ranges), then read between its offsets."""
        try:
            ranges = self.planner.replay_ranges(offsets_from_json(start), offsets_from_json(end))
        finally:
            self.planner.stop()  # this task's copy: its probe consumer is not needed again
        batches: list[Any] = []
        for p, (lo, hi) in sorted(ranges.items()):
            batches.extend(self.planner.read(KafkaInputPartition(self.opts.topic, p, lo, hi)))
        return iter(batches)

    def commit(self, end: dict) -> None:
        """Spark's checkpoint is the record of positions, Kafka holds none (a resume batch's commit records
        the topic id the positions now belong to)."""
        self.planner.committed(end)

    def stop(self) -> None:
        self.planner.stop()
        pf, self._prefetch = self._prefetch, None
        if pf is not None:
            pf.close()

    # -- reading
    def _identity_due(self) -> bool:
        now = time.monotonic()
        if not self.opts.identity_file or now - self._identity_at < self.identity_every_s:
            return False
        self._identity_at = now
        return True

    def _prefetcher(self, begin: dict[int, int], paced: bool) -> Prefetcher:
        if self._prefetch is None:
            from confluent_kafka import Consumer

            from spark_apps.runtime.source.decode import EventDecoder

            # Fetch continuously: a fetch is held up to 200 ms for data. Measured on Tansu at 20k events/s:
            # records ~90 ms old (p50) when a batch takes them, and the broker at ~5% of a core for this
            # consumer; holding fetches 20-50 ms made records ~50 ms fresher for 15-20% of a core, and 100 ms
            # changed no latency for the broker's +0.05-0.08 cores (A/B, bench/HISTORY.md).
            tuning = {"queued.min.messages": 1_000_000, "fetch.queue.backoff.ms": 1, "fetch.wait.max.ms": 200}
            conf = self.planner._conf(**tuning)
            # The user's kafka.* settings still win (_conf): over the pace as over the rest of the tuning.
            paced_conf = self.planner._conf(
                **{
                    **tuning,
                    "queued.min.messages": 1,
                    "fetch.queue.backoff.ms": FOLLOW_FETCH_PACE_MS,
                    "max.partition.fetch.bytes": FOLLOW_PARTITION_FETCH_BYTES,
                }
            )
            decode: Callable[[list], tuple[list[int], list[list], list[tuple]]]
            if self.opts.value_fields is None:
                width, decode = 4, lambda msgs: (list(map(lambda m: m.offset(), msgs)), raw_columns(msgs), [])
            else:
                decoder = EventDecoder(self.opts.value_fields, self.opts.required)
                width, decode = len(self.opts.value_fields), lambda msgs: decode_records(decoder, msgs)
            per_partition = max(10_000, MAX_BUFFERED // max(1, len(begin)))
            self._prefetch = Prefetcher(
                lambda: Consumer(conf),
                self.opts.topic,
                begin,
                width,
                decode,
                per_partition,
                align=self.opts.align_partitions,
                make_paced_consumer=lambda: Consumer(paced_conf),
                paced=paced,
            )
        return self._prefetch

    def _quiet_until(self, following: bool) -> float:
        """Until when a partition at its end need not fetch (time.monotonic()): the next batch's earliest
        start less the window (an active tailing on a trigger interval), or the cap's next move less the
        window (a standby whose cap the follower paces); 0 (fetch as records come) for a slot that follows
        unpaced (a fence: its consumer is paced instead) or reads to an AvailableNow target."""
        if self._target is not None:
            return 0.0
        if following:
            moves_at = read_pace_hint(self.opts.cap_file)
            if moves_at is None:
                return 0.0
            return time.monotonic() + (moves_at - time.time()) - FOLLOW_WINDOW_LEAD_S
        next_look = self._pacer.next_look()
        if next_look is None:
            return 0.0
        return next_look - self._lead.s

    def _note_times(self, taken: dict[int, Taken], end: dict[int, int]) -> None:
        if self._times is None:
            return
        oldest = [t.oldest_ms for t in taken.values() if t.oldest_ms is not None]
        newest = [t.newest_ms for t in taken.values() if t.newest_ms is not None]
        records = sum(len(t.offsets) for t in taken.values())  # the events handed to Spark, packed or not
        self._times.add(BatchTimes(end, min(oldest, default=None), max(newest, default=None), records))

    def _limits(self, parts: list[int]) -> tuple[dict[int, float], bool]:
        """Each partition's limit for the next batch, and whether the slot follows (a cap bounds it)."""
        cap = read_cap(self.opts.cap_file, parts, applied=self._applied) if self.opts.cap_file else None
        limits = {}
        for p in parts:
            limit = math.inf
            if cap is not None:
                limit = min(limit, cap[p])
            if self._target is not None and p in self._target:
                limit = min(limit, self._target[p])
            limits[p] = limit
        return limits, cap is not None

    def _batches(self, p: int, taken: Taken) -> list:
        if self.opts.value_fields is None:
            return [raw_record_batch(self.opts.topic, p, taken.columns)] if taken.offsets else []
        from spark_apps.runtime.sink.dead_letters import write_spool

        spool = self.opts.dead_letter_dir
        assert spool is not None  # declared with the value fields (source_options)
        write_spool(spool, p, taken.start, taken.end, *dead_columns(taken.dead))
        return [decoded_record_batch(self.opts, taken.columns)] if taken.offsets else []
