"""Records fetched and decoded ahead of the batch that takes them (the driver-side reader's buffer).

A thread consumes every partition continuously, decodes what arrives (kafka_driver_reader's `Rows`
builder: raw columns or the declared fields and dead letters) and appends it to a per-partition
buffer. When Spark asks for the next batch, the reader takes from the buffers up to each partition's
limit (cap file, AvailableNow target) and the batch's record budget: the Kafka round trips and the
decoding happened while the previous batch ran, off the batch's critical path. What lies past a
limit stays buffered until the limit moves (a standby capped at the active's position, a fence),
so nothing is fetched twice.

Positions: a buffer starts where the next batch starts. A batch that starts elsewhere (the engine
re-planned after a failed batch) has its partition sought and the buffer emptied. A partition's
`next` is the consumer's position, which moves past transaction markers (they use offsets but are
never delivered), so a batch can end after trailing markers, as the executor read does.

Catching up, partitions move abreast in time: while any partition still owes records (the consumer has
not reached its end since its last records), a batch takes from each partition only records written no
later than the newest record every such partition has ready (record timestamps, + ALIGN_SLACK_MS), so
no partition runs ahead of the others while a backlog is read (a restart, a standby catching up, a
reprocess). An event-time watermark is the newest event time seen minus a delay, over every partition:
one partition read minutes ahead would make the others' events late, and dropped. ALIGN_MAX_HOLD_S bounds how long a partition
whose fetch brings nothing may hold the others back. Only for an app with an event-time watermark
(frame.uses_event_time; the source's alignPartitions): without one, the order across partitions
changes no result, and holding records back cost a saturated active's batches their records: at the
seed's rate, p99 12.3-13.2 s with it against 8.3-8.5 s without (both behind, bench/throughput.py).

Event times: each fetched chunk of a partition leaves one stamp (its first offset, its first and last
record's timestamp), so a batch knows when its oldest and newest records were written to within a
fetch's span, at no per-record cost (a list of timestamps per record cost the slots' Python ~0.013
cores at 20,085 events/s): the slot's end-to-end latency, and the times the partitions are kept abreast by.

Paced fetching (a slot that follows: a standby, or an active fenced for a handoff): the consumer waits
after each fetch that brought records (librdkafka's fetch.queue.backoff.ms with queued.min.messages 1,
the reader's conf) instead of fetching again as soon as one returns, about once per producer batch. Such
a slot takes records only up to its cap, which trails what the broker holds by the active's batch, so a
wait of a fraction of that changes nothing it does, and a backlog still comes in large fetches. The
broker answers far fewer fetches: on the embedded broker every fetch that finds records costs a pass over
the whole partition (docs/operations.md, "The embedded broker"). When the slot stops following (a
takeover, a cutover, a rollback's lifted fence) the thread swaps to a consumer that fetches at once,
assigned where the buffers end, so nothing is read twice or skipped. A standby whose cap the follower
paces (2 s by default) also fetches in a window, before the cap's next move (pace_hint.py; the planner
names the quiet time as for an active, below). Its consumer seldom hears that a partition reached its end
(librdkafka says so only for a fetch that brought nothing, and a paced fetch always finds the records
written while it waited), so the thread counts a partition at its end once its position stands at the
high watermark its fetches last reported.

Fetching in a window (an active that tails its input): its batches take records only when the trigger
interval has passed, so a record fetched the moment it is written waits in the buffer as long as one
fetched shortly before the batch looks. After each batch's look the planner names a quiet time
(`quiet`): until then a partition that has reached its end (and delivered records) is paused and
fetches nothing; then the window opens, the first fetch brings what was written meanwhile, and the
partition fetches at once again until the look, so a batch takes what it took before. A partition
that has not reached its end since the reader started (a restart's backlog) fetches on through the
quiet time; one that falls behind later is read in the windows, where a fetch brings up to a megabyte
a partition, hundreds of thousands of records a second. Without the quiet time the active fetched once per producer batch, and
on the embedded broker every fetch that finds records costs a pass over the partition (docs/operations.md,
"The embedded broker"). librdkafka's pause drops what it had fetched for the partition and
not handed over; at the window the thread resumes the partition and seeks it to where its buffer ends
(a resume alone waits for librdkafka's broker thread to wake, up to a second), so nothing is skipped or
read twice (the thread's append keeps only offsets past the buffer's `next`).

How long before the look the window opens is the planner's (kafka_driver_reader's WindowLead): each look
asks `window_report` whether every partition resumed at the window's opening had answered (records, or
its end) and how long after the opening the last first answer came, and the planner lengthens the next
lead when a partition had not, so a busy host's late answers do not cost records a trigger.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import KafkaError

from baton.kafka.tail import is_fatal as _fatal
from spark_apps.runtime.source.source_plan import split_limit

log = logging.getLogger(__name__)

CONSUME_MAX = 10_000
# librdkafka's answer to a fetch position the broker does not hold, with auto.offset.reset=error
# (_AUTO_OFFSET_RESET, measured on Apache Kafka 3.8; OFFSET_OUT_OF_RANGE is the broker's own code).
OUT_OF_RANGE = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)
CONSUME_WAIT_S = 0.02
# How long partitions with records ready may be held back for one whose fetch brings nothing (aligned_limits):
# past it a batch takes what is ready, with a warning.
ALIGN_MAX_HOLD_S = 10.0
# Records written up to this long after the frontier are not held: partitions' fetches arrive a few ms
# apart in steady state, and holding those records would cost them a trigger of latency for nothing.
# A skew this small is far inside any watermark's delay.
ALIGN_SLACK_MS = 1000


@dataclass
class Taken:
    """What a batch takes from one partition: [start, end), good rows (offsets, columns) and dead letters."""

    start: int
    end: int
    offsets: list[int]
    columns: list[list]
    dead: list[tuple[int, bytes | None, bytes | None, str]]  # (offset, key, value, reason)
    # The oldest and newest record timestamps (ms) of the fetched chunks the batch took from: its oldest
    # and newest records' times within a fetch's span (None: nothing taken, or records without timestamps).
    oldest_ms: int | None = None
    newest_ms: int | None = None


@dataclass
class Stamp:
    """A fetched chunk of one partition: where it starts and its first and last records' timestamps."""

    offset: int
    first_ms: int
    last_ms: int


@dataclass
class PartitionBuffer:
    start: int  # the first offset not taken yet
    next: int  # the offset after everything consumed (past markers)
    width: int  # number of columns
    caught_up: bool = False  # the consumer reached the partition's end at least once
    at_end: bool = False  # the consumer's last word on the partition: it reached the end (EOF)
    offsets: list[int] = field(default_factory=list)
    columns: list[list] = field(default_factory=list)
    dead: list[tuple] = field(default_factory=list)
    stamps: list[Stamp] = field(default_factory=list)  # the buffered chunks', in offset order

    def __post_init__(self):
        if not self.columns:
            self.columns = [[] for _ in range(self.width)]

    def __len__(self) -> int:
        return len(self.offsets) + len(self.dead)

    def append(
        self, offsets: list[int], columns: list[list], dead: list[tuple], next_offset: int, stamp: Stamp | None = None
    ) -> None:
        if stamp is not None:
            self.stamps.append(stamp)
        self.offsets.extend(offsets)
        for mine, more in zip(self.columns, columns):
            mine.extend(more)
        self.dead.extend(dead)
        self.next = max(self.next, next_offset)

    def available(self, limit: float) -> int:
        """Records (good and dead) below `limit`."""
        return bisect_left(self.offsets, limit) + bisect_left([d[0] for d in self.dead], limit)

    def take(self, limit: float, budget: int) -> Taken:
        """Everything below `limit`, at most `budget` records; the end is the first offset not taken."""
        g = bisect_left(self.offsets, limit)
        d = bisect_left([x[0] for x in self.dead], limit)
        end = min(limit, self.next)
        if g + d > budget:  # cut at the budget-th record in offset order
            gi = di = 0
            while gi + di < budget:
                if di >= d or (gi < g and self.offsets[gi] < self.dead[di][0]):
                    gi += 1
                else:
                    di += 1
            g, d = gi, di
            following = [
                o
                for o in (
                    self.offsets[g] if g < len(self.offsets) else None,
                    self.dead[d][0] if d < len(self.dead) else None,
                )
                if o is not None
            ]
            end = min(following)
        taken = Taken(
            self.start, int(max(end, self.start)), self.offsets[:g], [c[:g] for c in self.columns], self.dead[:d]
        )
        at = [st.offset for st in self.stamps]
        n = bisect_left(at, taken.end)  # the chunks holding records of [start, end)
        if g + d and n:
            taken.oldest_ms = self.stamps[0].first_ms if self.stamps[0].first_ms >= 0 else None
            taken.newest_ms = max(st.last_ms for st in self.stamps[:n]) if taken.oldest_ms is not None else None
        # Keep the chunk holding the new start (its rest is still buffered).
        del self.stamps[: max(0, bisect_left(at, taken.end + 1) - 1)]
        del self.offsets[:g]
        for c in self.columns:
            del c[:g]
        del self.dead[:d]
        self.start = taken.end
        return taken

    def written_by(self, limit_ms: int) -> int:
        """Where the first buffered chunk written after `limit_ms` starts (the next offset if none)."""
        for st in self.stamps:  # a few chunks: each is a fetch's worth
            if st.first_ms > limit_ms:
                return st.offset
        return self.next


@dataclass
class WindowOpening:
    """A fetch window's opening (module docstring, "Fetching in a window"): when, the partitions it resumed,
    and when each first answered after it (records or its end, buffered)."""

    at: float
    waiting: frozenset[int]
    answered: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class WindowReport:
    """What a look found of its window: whether every resumed partition had answered, and the seconds from the
    opening to the last first answer (all answered) or to the look (some had not: a lower bound)."""

    answered: bool
    delay_s: float


class Prefetcher:
    """Owns the consumer and its thread; `take` is called by the batch planner."""

    def __init__(
        self,
        make_consumer: Callable,
        topic: str,
        begin: dict[int, int],
        width: int,
        decode: Callable[[list], tuple[list[int], list[list], list[tuple]]],
        max_buffered: int,
        align: bool = True,
        make_paced_consumer: Callable | None = None,
        paced: bool = False,
    ):
        self.topic, self.width, self.decode, self.max_buffered = topic, width, decode, max_buffered
        # The consumer that fetches at once, and the paced one (module docstring); None: never paced.
        self._make_at_once, self._make_paced = make_consumer, make_paced_consumer
        self._paced = self._want_paced = paced and make_paced_consumer is not None
        self.align = align  # keep the partitions abreast in time (aligned_limits): for an event-time watermark
        self.buffers = {p: PartitionBuffer(o, o, width) for p, o in begin.items()}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._seeks: dict[int, int] = {}
        self._out_of_range: dict[int, int] = {}  # partition -> the offset the broker said is not in the log
        self._paused: set[int] = set()
        self._assigned: set[int] = set(begin)
        self._held_since: float | None = None  # when aligned_limits began holding partitions back
        self._quiet_until = 0.0  # time.monotonic() until which a partition that reached its end fetches nothing
        # Partitions the consumer has delivered records of. Only those are paused in a quiet time: librdkafka
        # seeks a partition that has delivered nothing yet no sooner than a plain resume (measured).
        self._delivered: set[int] = set()
        self._was_quiet = False  # the thread's last pass was in a quiet time
        self._window: WindowOpening | None = None  # the last window's opening, until a look reports it
        self._consumer = self._make_consumer(self._paced)
        from confluent_kafka import TopicPartition

        self._consumer.assign([TopicPartition(topic, p, o) for p, o in sorted(begin.items())])
        self._thread = threading.Thread(target=self._run, name=f"baton-prefetch-{topic}", daemon=True)
        self._thread.start()

    # -- the planner's side
    def pace(self, paced: bool) -> None:
        """Fetch paced (the slot follows) or at once; the thread swaps its consumer when this changes."""
        self._want_paced = paced and self._make_paced is not None

    def quiet(self, until: float) -> None:
        """Until `until` (time.monotonic()), a partition that has reached its end fetches nothing
        (module docstring, "Fetching in a window"); 0: fetch as records come."""
        self._quiet_until = until

    def window_report(self) -> WindowReport | None:
        """What the window opened since the last call found (None: none opened): called at a look."""
        now = time.monotonic()
        with self._lock:
            w, self._window = self._window, None
        if w is None:
            return None
        if all(p in w.answered for p in w.waiting):
            return WindowReport(True, max(w.answered.values(), default=w.at) - w.at)
        return WindowReport(False, now - w.at)

    def take(self, begin: dict[int, int], limits: dict[int, float], budget: int | None) -> dict[int, Taken]:
        """Records from `begin` up to `limits`, at most `budget` in all (split across partitions in
        proportion to what each has ready). Partitions whose buffer is elsewhere are sought: they
        contribute nothing to this batch."""
        self._raise()
        with self._lock:
            for p, o in begin.items():
                buf = self.buffers.get(p)
                if buf is None or buf.start != o:
                    self.buffers[p] = PartitionBuffer(o, o, self.width)
                    self._seeks[p] = o
            if self.align:
                limits = self._aligned(begin, limits)
            ready = {p: self.buffers[p].available(limits.get(p, float("inf"))) for p in begin if p not in self._seeks}
            share = (
                split_limit({p: n for p, n in ready.items() if n}, budget)
                if budget is not None and any(ready.values())
                else None
            )
            out = {}
            for p in sorted(ready):
                n = ready[p] if share is None else share.get(p, 0)
                out[p] = self.buffers[p].take(limits.get(p, float("inf")), n)
            return out

    def _aligned(self, begin: dict[int, int], limits: dict[int, float]) -> dict[int, float]:
        bufs = {p: self.buffers[p] for p in begin if p not in self._seeks}
        aligned = aligned_limits(bufs, limits)
        if all(aligned.get(p, math.inf) >= min(limits.get(p, math.inf), b.next) for p, b in bufs.items()):
            # Nothing buffered is held back (in steady state a partition's end is often on its way: it
            # is behind, but its records are all below the frontier): not a hold, none to time out.
            self._held_since = None
            return limits
        now = time.monotonic()
        if self._held_since is None:
            self._held_since = now
        if now - self._held_since > ALIGN_MAX_HOLD_S:
            log.warning(
                "%s: partitions %s brought nothing for %.0f s while the others have records ready: taking "
                "those without keeping the partitions abreast",
                self.topic,
                sorted(p for p, b in bufs.items() if not b.stamps and not b.at_end),
                now - self._held_since,
            )
            return limits
        return aligned

    def wait_until(
        self,
        ends: dict[int, float] | None,
        budget: int | None,
        timeout_s: float,
        limits: dict[int, float] | None = None,
    ) -> bool:
        """Wait until every partition's buffer reaches `ends`, or (ends None) the partition's end as the
        consumer found it, or holds `budget` records below the limits; False on timeout. A full buffer
        counts as reached: its fetching is paused until a batch takes from it (a backlog larger than the
        buffer, read to an AvailableNow target, is read in several batches)."""
        ends_or_limits = ends if ends is not None else (limits or {p: float("inf") for p in self.buffers})
        deadline = time.monotonic() + timeout_s
        while True:
            self._raise()
            with self._lock:
                if ends is None:
                    reached = all(
                        b.caught_up or b.next >= ends_or_limits.get(p, float("inf")) or self._full(b)
                        for p, b in self.buffers.items()
                        if p not in self._seeks
                    )
                else:
                    reached = all(
                        p not in self.buffers
                        or p in self._seeks
                        or self.buffers[p].next >= e
                        or self._full(self.buffers[p])
                        for p, e in ends.items()
                    )
                enough = (
                    budget is not None
                    and sum(self.buffers[p].available(e) for p, e in ends_or_limits.items() if p in self.buffers)
                    >= budget
                )
            if reached or enough:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)

    def _full(self, buf: PartitionBuffer) -> bool:
        return len(buf) >= self.max_buffered

    def out_of_range(self) -> dict[int, int]:
        """Partitions whose fetch position the broker said is not in the log (Apache Kafka answers
        OFFSET_OUT_OF_RANGE; librdkafka then fetches nothing more for them): the planner checks where the
        query stands (input_check.py). Tansu answers such a fetch with nothing at all: that case is found by
        the check at a query's start."""
        with self._lock:
            return dict(self._out_of_range)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        try:
            self._consumer.close()
        except RuntimeError:
            pass

    def _raise(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"the source's prefetch thread failed: {self._error!r}") from self._error

    # -- the thread
    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._swap_if_asked()
                self._apply_seeks_and_pauses()
                self._absorb(self._consumer.consume(CONSUME_MAX, CONSUME_WAIT_S))
        except BaseException as exc:  # noqa: BLE001 - surfaced to the planner by take()
            self._error = exc

    def _swap_if_asked(self) -> None:
        """A consumer of the pace asked for, assigned where each buffer ends (a seek the planner asked for
        has emptied its buffer at the sought offset): what the old one had fetched but not handed over is
        fetched again, nothing is skipped."""
        paced = self._want_paced
        if paced == self._paced:
            return
        from confluent_kafka import TopicPartition

        with self._lock:
            starts = {p: b.next for p, b in self.buffers.items()}
            self._seeks = {}
        old, self._consumer = self._consumer, self._make_consumer(paced)
        self._consumer.assign([TopicPartition(self.topic, p, o) for p, o in sorted(starts.items())])
        self._assigned, self._paused, self._paced, self._delivered = set(starts), set(), paced, set()
        try:
            old.close()
        except RuntimeError:
            pass
        log.info("%s: fetching %s from %s", self.topic, "paced" if paced else "at once", starts)

    def _make_consumer(self, paced: bool):
        return self._make_paced() if paced and self._make_paced is not None else self._make_at_once()

    def _apply_seeks_and_pauses(self) -> None:
        from confluent_kafka import TopicPartition

        with self._lock:
            seeks, self._seeks = self._seeks, {}
            new = [p for p in self.buffers if p not in self._assigned]
            quiet = time.monotonic() < self._quiet_until
            # A full buffer, or in the quiet time a partition that has reached its end: no fetching until
            # that changes.
            held = {
                p
                for p, b in self.buffers.items()
                if self._full(b) or (quiet and b.caught_up and p in self._delivered and p not in seeks)
            }
            nexts = {p: b.next for p, b in self.buffers.items()}
        if new:
            self._consumer.incremental_assign([TopicPartition(self.topic, p, self.buffers[p].start) for p in new])
            self._assigned.update(new)
        for p, o in seeks.items():
            if p not in new:
                self._consumer.seek(TopicPartition(self.topic, p, o))
        pause = [TopicPartition(self.topic, p) for p in held - self._paused]
        resume = [TopicPartition(self.topic, p) for p in self._paused - held]
        if pause:
            self._consumer.pause(pause)
        if resume and self._was_quiet and not quiet:
            with self._lock:
                self._window = WindowOpening(time.monotonic(), frozenset(tp.partition for tp in resume))
        self._was_quiet = quiet
        if resume:
            self._consumer.resume(resume)
            # librdkafka's resume alone leaves the partitions to its broker thread's next wake-up, up to a
            # second later (measured: 90-960 ms, longer than a window); a seek to the same position fetches
            # at once (~6 ms).
            for tp in resume:
                if tp.partition not in seeks:
                    self._consumer.seek(TopicPartition(self.topic, tp.partition, nexts[tp.partition]))
        self._paused = held

    def _absorb(self, msgs: list) -> None:
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        by_part: dict[int, list] = {}
        at_end: set[int] = set()
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                elif err.code() in OUT_OF_RANGE:
                    with self._lock:
                        self._out_of_range.setdefault(m.partition(), m.offset())
                elif _fatal(err):
                    raise KafkaException(err)
                continue
            by_part.setdefault(m.partition(), []).append(m)
        decoded = {p: self.decode(ms) for p, ms in by_part.items()}
        self._delivered.update(by_part)
        positions = {
            tp.partition: tp.offset
            for tp in self._consumer.position([TopicPartition(self.topic, p) for p in self.buffers])
        }
        if self._paced:
            at_end |= self._reached_high_watermark(by_part, positions)
        with self._lock:
            for p, (offs, cols, dead) in decoded.items():
                buf = self.buffers.get(p)
                last = max(offs[-1] if offs else -1, dead[-1][0] if dead else -1)
                if buf is None or p in self._seeks or last < buf.next:
                    continue  # from before a seek the planner asked for
                keep = bisect_left(offs, buf.next)  # never append what is buffered already
                dkeep = bisect_left([d[0] for d in dead], buf.next)
                buf.append(offs[keep:], [c[keep:] for c in cols], dead[dkeep:], last + 1, _stamp(by_part[p], buf.next))
            for p in by_part:
                if p in self.buffers:
                    self.buffers[p].at_end = False
            for p, pos in positions.items():
                buf = self.buffers.get(p)
                if buf is not None and p not in self._seeks and pos is not None and pos > buf.next:
                    buf.next = pos  # past transaction markers
            for p in at_end:
                if p in self.buffers and p not in self._seeks:
                    self.buffers[p].caught_up = self.buffers[p].at_end = True
            w = self._window
            if w is not None:
                now = time.monotonic()
                for p in (set(by_part) | at_end) & w.waiting:
                    w.answered.setdefault(p, now)

    def _reached_high_watermark(self, parts, positions: dict[int, int | None]) -> set[int]:
        """The partitions among `parts` whose position stands at the high watermark their last fetch reported.
        librdkafka reports a partition's end only for a fetch that brought nothing, which the paced consumer
        seldom sends: it waits after every fetch that brought records, and a producer writes meanwhile."""
        from confluent_kafka import TopicPartition

        ends = set()
        for p in parts:
            pos = positions.get(p)
            _, high = self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), cached=True)
            if pos is not None and high is not None and 0 <= high <= pos:
                ends.add(p)
        return ends


def _stamp(msgs: list, after: int) -> Stamp | None:
    """The stamp of a chunk's records at `after` or later (None: none)."""
    first = msgs[0] if msgs[0].offset() >= after else next((m for m in msgs if m.offset() >= after), None)
    if first is None:
        return None
    return Stamp(first.offset(), first.timestamp()[1], msgs[-1].timestamp()[1])


def aligned_limits(buffers: dict[int, PartitionBuffer], limits: dict[int, float]) -> dict[int, float]:
    """Limits that keep partitions abreast in time while they catch up: a partition still owing records
    (the consumer has not reached its end since its last records, and its buffer is below its limit)
    holds every partition to the records written no later than its newest one ready; one owing records
    with none ready holds them where they are (briefly: its end, or records, are on the way)."""
    behind = {p: b for p, b in buffers.items() if not b.at_end and b.next < limits.get(p, math.inf)}
    if not behind:
        return limits
    if any(not b.stamps for b in behind.values()):
        frontier = -1  # a partition behind with nothing ready: its time is unknown
    else:
        frontier = min(b.stamps[-1].last_ms for b in behind.values()) + ALIGN_SLACK_MS
    out = dict(limits)
    for p, b in buffers.items():
        out[p] = min(limits.get(p, math.inf), max(b.start, b.written_by(frontier)))
    return out
