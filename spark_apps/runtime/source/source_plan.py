"""What a batch of Baton's Kafka source reads, planned from offsets alone: its end (cap, admission
control, pacing) and its input partitions. Pure offset arithmetic, unit-tested without a broker.

Offsets are {"<partition>": next offset to read} with partitions in numeric order (Spark compares
offsets by their JSON text)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import InputPartition

from spark_apps.runtime.coordination.applied_cap import CAP_WRITE_KEY, AppliedCap
from spark_apps.runtime.source.source_options import EARLIEST, LATEST, parse_partition_json


def offsets_to_json(offsets: Mapping[int, int]) -> dict[str, int]:
    """{1: 7, 0: 42} -> {"0": 42, "1": 7}: numeric partition order, so equal offsets are equal JSON."""
    return {str(p): int(offsets[p]) for p in sorted(offsets)}


def offsets_from_json(offsets: Mapping[str, Any]) -> dict[int, int]:
    return {int(p): int(o) for p, o in offsets.items()}


def resolve_starting(
    spec: dict[int, int], partitions: Sequence[int], lows: Mapping[int, int], ends: Mapping[int, int]
) -> dict[int, int]:
    """Check a startingOffsets JSON against the topic and resolve the -2/-1 markers."""
    unknown = sorted(set(spec) - set(partitions))
    if unknown:
        raise ValueError(
            f"option 'startingOffsets' names partitions {unknown} that the topic does not have "
            f"(it has {sorted(partitions)})"
        )
    missing = sorted(set(partitions) - set(spec))
    if missing:
        raise ValueError(f"option 'startingOffsets' must name every partition; missing {missing}")
    out = {}
    for p in sorted(partitions):
        o = spec[p]
        if o == EARLIEST:
            o = lows[p]
        elif o == LATEST:
            o = ends[p]
        elif not lows[p] <= o <= ends[p]:
            raise ValueError(
                f"option 'startingOffsets': offset {o} for partition {p} is outside the "
                f"partition's available range [{lows[p]}, {ends[p]}]"
            )
        out[p] = o
    return out


def parse_cap(text: str, partitions: Sequence[int], path: str = "capFile") -> dict[int, int]:
    """The cap file's JSON -> {partition: cap}; it must name exactly the topic's partitions. Its
    CAP_WRITE_KEY (which write of the follower's it is: applied_cap.py) is not a partition."""
    spec = parse_partition_json(f"capFile ({path})", text, "", allow_markers=False, ignore=(CAP_WRITE_KEY,))
    unknown = sorted(set(spec) - set(partitions))
    missing = sorted(set(partitions) - set(spec))
    if unknown or missing:
        raise ValueError(
            f"option 'capFile' ({path}) must name every partition of the topic "
            f"{sorted(partitions)}: missing {missing}, unknown {unknown}"
        )
    return spec


def cap_text(path: str | None) -> str | None:
    """The cap file's text as it stands (None: no file): what BatchPacer compares."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def read_cap(
    path: str, partitions: Sequence[int], attempts: int = 3, applied: AppliedCap | None = None
) -> dict[int, int] | None:
    """Read the cap file; None when it does not exist. A torn read is retried briefly. `applied`: the
    source plans its next batch under what this returns, and says so (applied_cap.py)."""
    for i in range(attempts):
        text = cap_text(path)
        if text is None:
            if applied is not None:
                applied.note(None)
            return None
        try:
            cap = parse_cap(text, partitions, path)
            if applied is not None:
                applied.note(text)
            return cap
        except ValueError:
            if i == attempts - 1:
                raise
            time.sleep(0.05)
    return None  # unreachable


# The query's trigger ticks this often; the app's trigger_ms paces its batches here (BatchPacer), where a
# moved cap starts a batch on the next tick instead of at the next multiple of trigger_ms (a handoff's
# critical path crossed two such waits).
TRIGGER_TICK_MS = 100
# How early BatchPacer counts an interval as passed: half a tick, so a look lands on the tick nearest
# the interval whatever each tick's delay (never a whole tick late, never a tick early).
TICK_SLACK_S = TRIGGER_TICK_MS / 2000


class BatchPacer:
    """Holds a trigger (no batch) until `interval_s` has passed since the last look at the input,
    unless the cap file changed since then.

    The harness runs the query on a short trigger (a tick) and gives the app's trigger interval here:
    Spark's processing-time trigger waits for the next multiple of its interval, so a slot whose cap
    had just moved (a standby the active's marker let on, the fence a new active must reach, the cap
    lifted once it stands there) waited up to a whole interval, twice on a handoff's critical path.
    A held trigger costs a read of the cap file, nothing on the broker. State: two plain fields (the
    reader is pickled).

    The interval counts as passed half a tick early: ticks fire on a fixed grid, and each look happens
    a few ms after its tick, by a delay that varies. Held to the exact interval, a look that came a
    little sooner after its tick than the previous look did found the interval not quite passed and
    waited a whole tick more: measured at the seed's rate, 60% of a 1 s trigger's batches were 1.1 s apart, which is
    100 ms more waiting for those batches' events (their latency) and larger batches."""

    def __init__(self, interval_s: float, cap_file: str | None):
        self.interval_s, self.cap_file = interval_s, cap_file
        self._looked_at: float | None = None
        self._looked_cap: str | None = None

    def hold(self, now: float | None = None) -> bool:
        if self.interval_s <= 0:
            return False
        now = time.monotonic() if now is None else now
        text = cap_text(self.cap_file)
        if (
            self._looked_at is not None
            and text == self._looked_cap
            and now - self._looked_at < self.interval_s - TICK_SLACK_S
        ):
            return True
        self._looked_at, self._looked_cap = now, text
        return False

    def next_look(self) -> float | None:
        """When the interval next counts as passed (time.monotonic()): the earliest the next batch can
        start unless the cap moves. None: no interval, or no look yet."""
        if self.interval_s <= 0 or self._looked_at is None:
            return None
        return self._looked_at + self.interval_s - TICK_SLACK_S


def split_limit(backlog: Mapping[int, int], limit: int) -> dict[int, int]:
    """Share `limit` offsets across partitions in proportion to their backlog.

    Largest-remainder apportionment: the result never exceeds a partition's backlog, sums to
    min(limit, total backlog) exactly, and is therefore > 0 whenever anything is waiting (a
    batch always makes progress, even when limit < number of partitions). Ties go to the lower
    partition number, so the split is deterministic.
    """
    if limit <= 0:
        raise ValueError("limit must be positive")
    total = sum(backlog.values())
    if total <= limit:
        return dict(backlog)
    share = {p: limit * b // total for p, b in backlog.items()}
    left = limit - sum(share.values())
    by_remainder = sorted(backlog, key=lambda p: (-(limit * backlog[p] % total), p))
    for p in by_remainder:
        if left == 0:
            break
        if share[p] < backlog[p]:
            share[p] += 1
            left -= 1
    return share


def plan_end(
    start: Mapping[int, int],
    available: Mapping[int, int],
    *,
    cap: Mapping[int, int] | None = None,
    max_records: int | None = None,
    target: Mapping[int, int] | None = None,
) -> dict[int, int]:
    """A batch's end offsets: available, bounded by cap and the availableNow target, never below
    start (no rewind), then admission control. Partitions only in `available` start at their
    `start` entry, which the caller fills in (new partitions)."""
    end: dict[int, int] = {}
    for p in sorted(available):
        s = start[p]
        upper = available[p]
        if cap is not None:
            upper = min(upper, cap[p])
        if target is not None and p in target:
            upper = min(upper, target[p])
        end[p] = max(s, upper)
    for p in start:
        if p not in end:  # a partition that vanished from metadata keeps its position
            end[p] = start[p]
    if max_records is not None:
        backlog = {p: end[p] - start[p] for p in end if end[p] > start[p]}
        if backlog:
            share = split_limit(backlog, max_records)
            for p, n in share.items():
                end[p] = start[p] + n
    return {p: end[p] for p in sorted(end)}


class KafkaInputPartition(InputPartition):
    """Offsets [start, end) of one Kafka partition: one Spark task."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}[{self.partition}] {self.start}..{self.end})"


def plan_partitions(topic: str, start: Mapping[int, int], end: Mapping[int, int]) -> list[KafkaInputPartition]:
    return [KafkaInputPartition(topic, p, start[p], end[p]) for p in sorted(end) if end[p] > start.get(p, end[p])]
