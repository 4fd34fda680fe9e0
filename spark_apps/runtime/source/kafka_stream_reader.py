"""The stream reader of Baton's Kafka source (spark_apps.runtime.source.kafka_source): plans each batch on
the driver and reads it in executor tasks.

End offsets ("latest"), on both Tansu and Apache Kafka:
  ListOffsets gives a lower bound L of the readable end on both brokers (exact on Kafka, where
  librdkafka sends the consumer's isolation level so it is the last stable offset; on Tansu 0.6.0
  it is the last batch's base offset + 1, too low). A long-lived driver-side consumer is then
  assigned every partition at L and consumes to partition EOF: librdkafka signals EOF when its
  fetch position reaches the end offset of a Fetch response (the last stable offset for
  read_committed), and Fetch responses are right on Tansu too. On Kafka this costs one empty
  fetch per partition; on Tansu it re-reads the rest of the last batch. A partition without EOF
  within a bound (a producer outrunning the probe) falls back to the furthest position it
  reached, which is never past the end.
  `get_watermark_offsets(cached=True)` is not used: it is the high watermark, not the last
  stable offset, so under read_committed it could place an end inside an open transaction.

Timestamps: OffsetsForTimes is not used because Tansu 0.6.0 answers offset 0 for every timestamp.
The start offset is found by a binary search over offsets that reads one record per step, which
is right on every broker provided record timestamps do not decrease within a partition (always
true for LogAppendTime and for producers stamping wall-clock time in order).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from baton.kafka.client_config import kafka_config
from baton.kafka.fetch_wait import fetch_wait_ms
from baton.kafka.positions import first_record, search_timestamp
from baton.kafka.tail import probe_ends
from spark_apps.runtime.coordination.applied_cap import AppliedCap
from spark_apps.runtime.source.input_check import (
    BEFORE_START,
    FAIL,
    Decision,
    InputDataLoss,
    decide,
    observe,
    read_identity,
    skipped,
    topic_id,
    write_identity,
)
from spark_apps.runtime.source.source_columns import dead_columns, decoded_batches, raw_batches
from spark_apps.runtime.source.source_options import SourceOptions
from spark_apps.runtime.source.source_plan import (
    BatchPacer,
    KafkaInputPartition,
    cap_text,
    offsets_from_json,
    offsets_to_json,
    plan_end,
    plan_partitions,
    read_cap,
    resolve_starting,
)
from spark_apps.runtime.source.source_read import METADATA_TIMEOUT_S, read_range

if TYPE_CHECKING:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)

GROUP_ID = "baton-source"
PROBE_TIMEOUT_S = 10.0
# The probe's fetch that finds an end returns after this wait (longer where Tansu needs it: baton.kafka.fetch_wait).
PROBE_FETCH_WAIT_MS = 10


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Runs in three processes (Spark's source runner on the driver, the planner, the executors),
    each with its own copy: Kafka clients are created lazily and dropped when pickled."""

    def __init__(self, options: SourceOptions):
        self.opts = options
        self._probe: Consumer | None = None  # driver-side consumer for end offsets and timestamp search
        self._probe_wait = PROBE_FETCH_WAIT_MS  # its fetch.wait.max.ms
        self._latest: dict[int, int] | None = None  # last available ends seen (uncapped)
        self._lows: dict[int, int] = {}
        self._target: dict[int, int] | None = None  # Trigger.AvailableNow bound
        self._pacer = BatchPacer(options.min_batch_interval_s, options.cap_file)
        self._applied = AppliedCap(options.cap_file) if options.cap_file else None
        self._admin: AdminClient | None = None  # for the topic id (input_check.topic_id)
        self.verified = False  # this process checked the query's positions against the input (resume_point)
        self._jump: dict | None = None  # the end of the resume batch planned (policy earliest), until committed
        self._adopt: str | None = None  # the topic id to record once that batch is committed
        self._stale_cap: str | None = None  # the cap file's text when a resume moved positions back

    # -- pickling: never ship a client
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_probe"] = state["_admin"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)

    # -- clients
    def _conf(self, **tuning) -> dict:
        """Consumer settings: the source's own (not overridable: parse_options rejects them), then
        per-role tuning, then the user's kafka.* pass-through (which may override the tuning)."""
        conf = kafka_config(
            self.opts.bootstrap,
            {
                "group.id": GROUP_ID,  # required by librdkafka; no subscription, nothing committed
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "auto.offset.reset": "error",  # a position that no longer exists fails, never skips
            },
        )
        conf.update(tuning)
        conf.update(self.opts.kafka_conf)
        return conf

    def _consumer(self):
        wait = fetch_wait_ms(self.opts.bootstrap, self.opts.topic, PROBE_FETCH_WAIT_MS)
        if self._probe is not None and wait != self._probe_wait:  # a probe stalled: Tansu needs a longer wait
            self._probe.close()
            self._probe = None
        if self._probe is None:
            from confluent_kafka import Consumer

            self._probe, self._probe_wait = Consumer(self._conf(**{"fetch.wait.max.ms": wait})), wait
        return self._probe

    # -- metadata and offsets (driver)
    def _partition_ids(self) -> list[int]:
        md = self._consumer().list_topics(self.opts.topic, timeout=METADATA_TIMEOUT_S)
        t = md.topics.get(self.opts.topic)
        if t is None or t.error is not None or not t.partitions:
            why = f" ({t.error})" if t is not None and t.error is not None else ""
            raise ValueError(f"option 'topic': topic {self.opts.topic!r} does not exist{why}")
        return sorted(t.partitions)

    def _watermarks(self, parts: Sequence[int]) -> tuple[dict[int, int], dict[int, int]]:
        """(low, ListOffsets end) per partition: the end is a lower bound of the readable end."""
        from confluent_kafka import TopicPartition

        c = self._consumer()
        lows, ends = {}, {}
        for p in parts:
            lo, hi = c.get_watermark_offsets(
                TopicPartition(self.opts.topic, p), timeout=METADATA_TIMEOUT_S, cached=False
            )
            lows[p], ends[p] = lo, hi
        self._lows.update(lows)
        return lows, ends

    def available_ends(self, parts: Sequence[int]) -> dict[int, int]:
        """Readable end per partition: the ListOffsets lower bound, then read to EOF or past the bound."""
        _, bound = self._watermarks(parts)
        ends, unsettled = probe_ends(
            self._consumer(), self.opts.topic, bound, PROBE_TIMEOUT_S, self.opts.bootstrap, self._probe_wait
        )
        if unsettled:
            log.warning(
                "baton-kafka: no partition end found for %s of %s (fetch.wait.max.ms=%d); using positions reached",
                sorted(unsettled),
                self.opts.topic,
                self._probe_wait,
            )
        return ends

    def offset_for_timestamp(self, p: int, ts_ms: int, low: int, end: int) -> int:
        """Smallest offset o such that every record at >= o has timestamp >= ts_ms (assuming
        timestamps do not decrease within the partition): binary search, one record per step."""
        consumer = self._consumer()
        return search_timestamp(
            lambda o: first_record(consumer, self.opts.topic, p, o, end, self.opts.poll_timeout_s), ts_ms, low, end
        )

    # -- DataSourceStreamReader
    def initialOffset(self) -> dict:
        parts = self._partition_ids()
        o = self.opts
        if o.starting == "earliest":
            lows, _ = self._watermarks(parts)
            start = lows
        elif o.starting == "latest":
            start = self.available_ends(parts)
        else:
            ends = self.available_ends(parts)
            lows = {p: self._lows[p] for p in parts}
            if o.starting_timestamp is not None:
                start = {p: self.offset_for_timestamp(p, o.starting_timestamp, lows[p], ends[p]) for p in parts}
            else:
                start = resolve_starting(o.starting, parts, lows, ends)
        if o.dead_letter_dir:
            from spark_apps.runtime.sink.dead_letters import write_initial

            write_initial(o.dead_letter_dir, start)
        write_identity(o.identity_file, o.topic, self._topic_id())
        self.verified = True  # positions just read from the broker
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_records is not None:
            return ReadMaxRows(self.opts.max_records)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.available_ends(self._partition_ids())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if self._target is None and self._pacer.hold():
            return start
        begin = offsets_from_json(start)
        if not self.verified and (jump := self.resume_point(begin)) is not None:
            return offsets_to_json(jump)
        if self.cap_is_stale():
            return start
        parts = self._partition_ids()
        available = self.available_ends(parts)
        self._latest = available
        if any(available[p] < begin[p] for p in available if p in begin):
            # An end below the query's position (the ends are read to EOF: exact): the topic was recreated
            # or truncated under the running query. Fail with the reason, or resume at the earliest.
            if (jump := self.resume_point(begin)) is not None:
                return offsets_to_json(jump)
        for p in parts:
            if p not in begin:  # a partition added since the query started: read it from its start
                begin[p] = self._lows[p]
        cap = read_cap(self.opts.cap_file, parts, applied=self._applied) if self.opts.cap_file else None
        max_records = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = plan_end(begin, available, cap=cap, max_records=max_records, target=self._target)
        end_json = offsets_to_json(end)
        return start if end_json == start else end_json

    def reportLatestOffset(self) -> dict | None:
        return offsets_to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if end == self._jump:
            return []  # the resume batch: it only moves positions
        s, e = offsets_from_json(start), offsets_from_json(end)
        if not self.verified:  # a batch replayed after a restart: planned on input that may be gone
            self.verified = True
            ranges = self.replay_ranges(s, e)
            return [
                KafkaInputPartition(self.opts.topic, p, lo, hi) for p, (lo, hi) in sorted(ranges.items()) if hi > lo
            ]
        missing = [p for p in e if p not in s]
        if missing:
            if any(p not in self._lows for p in missing):
                self._watermarks(missing)
            for p in missing:
                s[p] = self._lows[p]
        return plan_partitions(self.opts.topic, s, e)

    def commit(self, end: dict) -> None:
        """Spark's checkpoint is the record of positions, Kafka holds none: only a resume batch's commit
        has something to record (the topic id its positions now belong to)."""
        self.committed(end)

    def stop(self) -> None:
        c, self._probe, self._admin = self._probe, None, None
        if c is not None:
            c.close()

    # -- is the input still where the positions are? (input_check.py)
    def verify(self, start: dict[int, int], end: dict[int, int] | None = None) -> Decision:
        """Check positions `start` (and, for a replayed batch, its `end`) against what the broker holds and
        the topic's identity. Raises InputDataLoss under policy fail; under earliest returns the decision
        (where lost partitions resume), after a warning naming what is skipped."""
        o = self.opts
        parts = self._partition_ids()
        want = {p: max(s, (end or {}).get(p, s)) for p, s in start.items() if p in parts}
        lows, ends = observe(self._consumer(), o.topic, parts, want, PROBE_TIMEOUT_S, METADATA_TIMEOUT_S)
        self._lows.update(lows)
        recorded, current = read_identity(o.identity_file), self._topic_id()
        recreated = (recorded, current) if recorded and current and recorded != current else None
        decision = decide(o.topic, start, lows, ends, o.on_data_loss, end=end, recreated=recreated)
        if decision.ok:
            if recorded is None:  # a checkpoint from before the identity file: the topic it reads now
                write_identity(o.identity_file, o.topic, current)
            return decision
        if o.on_data_loss == FAIL:
            raise InputDataLoss(decision.reason)
        log.warning("baton-kafka: %s", skipped(o.topic, decision))
        self._adopt = current if recorded != current else None  # recorded once the resume batch is committed
        return decision

    def resume_point(self, begin: dict[int, int]) -> dict[int, int] | None:
        """A query's first plan in this process (a restart, or a read that met an out-of-range position):
        verify where it stands. None: read on from `begin`. Else (policy earliest, something lost) the end of
        a batch that holds no records and moves each lost partition to its earliest offset."""
        decision = self.verify(begin)
        self.verified = True
        if decision.ok:
            return None
        jump = {**begin, **decision.resume}
        if jump == begin:  # at the earliest already (a resume batch committed before a restart)
            self._adopt_identity()
            return None
        self._jump = offsets_to_json(jump)
        if any(o < begin[p] for p, o in jump.items()):
            # Moved back: a cap written before (a standby's: what the active emitted, in the old topic's
            # offsets) means nothing for the new offsets. Hold until the cap is written again (the active's
            # own resume emitted): a standby never runs ahead of the active (invariant 2).
            self._stale_cap = cap_text(self.opts.cap_file)
        if self.opts.dead_letter_dir:  # forward moves hold no dead letters either (dead_letters.collect)
            from spark_apps.runtime.sink.dead_letters import write_spool

            for p, o in jump.items():
                if o > begin[p]:
                    write_spool(self.opts.dead_letter_dir, p, begin[p], o, *dead_columns([]))
        return jump

    def cap_is_stale(self) -> bool:
        """After a resume that moved positions back, the cap file still says what it said then: hold."""
        if self._stale_cap is None:
            return False
        if cap_text(self.opts.cap_file) == self._stale_cap:
            return True
        self._stale_cap = None
        return False

    def committed(self, end: dict) -> None:
        """A batch ending at `end` is committed: once the resume batch is, the new topic is the one the
        positions belong to."""
        if self._jump is not None and end == self._jump:
            self._jump = None
            self._adopt_identity()

    def replay_ranges(self, start: dict[int, int], end: dict[int, int]) -> dict[int, tuple[int, int]]:
        """The ranges a batch Spark replays after a restart reads, per partition of `end`: [start, end),
        checked first (it may have been planned on input that is gone). Under earliest a lost partition
        reads what is left of its range past retention, and nothing of a range the topic no longer holds."""
        s = {p: start[p] for p in end if p in start}
        decision = self.verify(s, end)
        lost = {x.partition: x for x in decision.losses}
        out = {}
        for p, e in end.items():
            lo = s[p] if p in s else min(self._lows.get(p, e), e)  # a partition new in this batch: from its start
            if p in lost:
                if lost[p].kind != BEFORE_START:
                    continue
                low = lost[p].low
                assert low is not None  # a BEFORE_START loss has the log's start
                lo = min(max(lo, low), max(lo, e))
            out[p] = (lo, e)
        return out

    def identity_changed(self, timeout_s: float) -> bool:
        """The topic's id differs from the one its positions belong to (a recreated topic under a running
        query). False when either is unknown, and while a resume batch waits for its commit."""
        if not self.opts.identity_file or self._jump is not None:
            return False
        recorded = read_identity(self.opts.identity_file)
        current = self._topic_id(timeout_s) if recorded else None
        return bool(recorded and current and recorded != current)

    def _adopt_identity(self) -> None:
        if self._adopt is not None:
            write_identity(self.opts.identity_file, self.opts.topic, self._adopt)
            self._adopt = None

    def _topic_id(self, timeout_s: float = METADATA_TIMEOUT_S) -> str | None:
        if not self.opts.identity_file:
            return None
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(kafka_config(self.opts.bootstrap, self.opts.kafka_conf))
        return topic_id(self._admin, self.opts.topic, timeout_s)

    # -- executors: the hot path
    # Spark hands read() back only the partitions this reader planned.
    def read(self, partition: KafkaInputPartition) -> Iterator[Any]:  # type: ignore[override]
        from confluent_kafka import Consumer

        topic, p, start, end = partition.topic, partition.partition, partition.start, partition.end
        if start >= end:
            return
        c = Consumer(
            self._conf(
                **{
                    "queued.min.messages": 1_000_000,
                    "fetch.queue.backoff.ms": 1,
                    "fetch.wait.max.ms": 100,
                }
            )
        )
        try:
            chunks = read_range(c, topic, p, start, end, self.opts.poll_timeout_s, self.opts.on_data_loss)
            if self.opts.value_fields is None:
                yield from raw_batches(chunks, topic, p)
            else:
                yield from decoded_batches(chunks, self.opts, p, start, end)
        finally:
            c.close()
