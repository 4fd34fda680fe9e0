"""Is the input still where the checkpoint says the query stands? (invariant 6: a broken input position
stops the slot with a reason; nothing hangs silently)

A restarted query resumes at its checkpoint's positions {partition: next offset}. They can be gone:
- beyond the end: the topic was deleted and recreated, or the broker lost its data (the embedded
  broker keeps everything in memory: `make down` / `make up` starts it empty);
- before the start: retention (or DeleteRecords) removed records the query had not read yet;
- the topic itself is another one: recreated (its topic id changed), even if the new topic has grown
  past the positions (offsets alone cannot tell);
- a partition the positions name is gone (the topic was recreated with fewer partitions).

Left alone, a consumer at such a position waits forever on Tansu 0.6.0 (a fetch beyond the end is
answered with no records and no error: measured) and, on Apache Kafka, gets OFFSET_OUT_OF_RANGE, after
which librdkafka fetches nothing more for that partition (auto.offset.reset=error: measured, even once
the offset exists again). Both used to leave a slot starting forever or failing with a bare librdkafka
error.

`decide` is the decision, a pure function of the positions, what the broker holds and the policy
(option onDataLoss, an app's `on_data_loss`):
- "fail" (default): stop with InputDataLoss, whose message names the topic, each partition, the
  checkpoint's position against what the broker holds, the likely cause and the way out;
- "earliest": resume each lost partition at its earliest available offset (a warning names what is
  skipped). The source does that with a batch that holds no records and only moves the positions
  (backwards after a reset, forwards past retention): every later batch reads real offsets.

What the broker holds (`observe`): the earliest offset and the end from ListOffsets, exact on Apache
Kafka. Tansu 0.6.0 reports the end as the last batch's base offset + 1, so a position a little past
that end is normal there; only for such a partition is the true end read, by consuming from the
reported end to partition EOF or to the position (the rest of one batch on Tansu; on Kafka, where
the reported end is exact, an empty fetch). A position P is in the log when the record before it
exists: EOF at or past P, or any record at or past P - 1 (P - 1 may be a transaction marker).

When it runs (no broker round trip per batch): at a query's first plan in a process (a restart), for
a batch Spark replays after a restart, whenever a read meets an out-of-range position, and when the
driver-side reader's look at the topic id (every 10 s: one DescribeTopics) finds another topic. Measured
at a restart: 20-70 ms on Apache Kafka, 110-150 ms on Tansu, clients' creation included.

A resume that moves positions back leaves a slot's cap file (a standby's: what the active emitted) in
the old topic's offsets: the source holds until the cap is written again, so a standby never runs ahead
of the active's own resume (invariant 2).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

FAIL, EARLIEST = "fail", "earliest"
POLICIES = (FAIL, EARLIEST)

BEYOND_END, BEFORE_START, RECREATED, GONE = "beyond the end", "before the start", "recreated", "gone"

WAY_OUT = (
    "The slot cannot resume from its checkpoint. Way out: reprocess into a new generation "
    "(baton_reprocess, while the other slot runs: fresh state, replayed from the input that exists), or set "
    "`on_data_loss: earliest` in the app definition and start it again to resume from the earliest "
    "available offsets (its state kept, what was lost skipped)"
)


# Partitions described in full in a message (the rest by their positions).
MAX_DESCRIBED = 4


class InputDataLoss(RuntimeError):
    """The checkpoint's positions are not in the input any more (policy "fail"). One line: the harness
    reports it as the slot's error."""


@dataclass(frozen=True)
class Loss:
    partition: int
    kind: str  # BEYOND_END, BEFORE_START, RECREATED, GONE
    position: int  # the checkpoint's position that is not in the log
    low: int | None = None  # what the broker holds: [low, end)
    end: int | None = None

    def describe(self) -> str:
        held = f"the broker holds [{self.low}, {self.end})" if self.low is not None else ""
        if self.kind == BEYOND_END:
            return (
                f"partition {self.partition}: checkpoint at offset {self.position}, beyond the end {self.end} ({held})"
            )
        if self.kind == BEFORE_START:
            return (
                f"partition {self.partition}: checkpoint at offset {self.position}, before the earliest available "
                f"offset {self.low} ({held}; offsets [{self.position}, {self.low}) are gone)"
            )
        if self.kind == RECREATED:
            return f"partition {self.partition}: checkpoint at offset {self.position} of the old topic ({held} now)"
        return f"partition {self.partition}: checkpoint at offset {self.position}, the topic has no such partition now"


@dataclass(frozen=True)
class Decision:
    losses: tuple[Loss, ...] = ()
    what: str = ""  # what is lost, and the likely cause ("" when nothing)
    resume: dict[int, int] = field(default_factory=dict)  # policy earliest: partition -> where to resume

    @property
    def reason(self) -> str:
        """The InputDataLoss message: what is lost and the way out."""
        return f"{self.what} {WAY_OUT}." if self.what else ""

    @property
    def ok(self) -> bool:
        return not self.losses


def check_policy(value: str, what: str = "onDataLoss") -> str:
    v = str(value).strip().lower()
    if v not in POLICIES:
        raise ValueError(f"{what} must be one of {', '.join(POLICIES)}; got {value!r}")
    return v


def decide(
    topic: str,
    start: Mapping[int, int],
    lows: Mapping[int, int],
    ends: Mapping[int, int],
    policy: str,
    *,
    end: Mapping[int, int] | None = None,
    recreated: tuple[str, str] | None = None,
) -> Decision:
    """Whether a query standing at `start` (and, for a batch replayed after a restart, reading on to `end`)
    can read its input. `lows`/`ends`: what the broker holds per partition that exists now, [low, end); an
    end must be exact where it is below the position checked (see `observe`). `recreated`: (topic id the
    checkpoint read, topic id now) when they differ. Nothing lost: Decision(). Else the losses, what is
    lost (its `reason`, with the way out, is the InputDataLoss message) and, under "earliest", where each
    lost partition resumes (its earliest offset; a partition that is gone keeps its position: there is
    nothing to read)."""
    policy = check_policy(policy)
    end = end or {}
    losses = []
    for p in sorted(start):
        s = start[p]
        upto = max(s, end.get(p, s))
        if p not in lows or p not in ends:
            losses.append(Loss(p, GONE, s))
        elif recreated is not None:
            losses.append(Loss(p, RECREATED, s, lows[p], ends[p]))
        elif upto > ends[p]:
            losses.append(Loss(p, BEYOND_END, upto, lows[p], ends[p]))
        elif s < lows[p]:
            losses.append(Loss(p, BEFORE_START, s, lows[p], ends[p]))
    if not losses:
        return Decision()
    resume = {x.partition: x.low for x in losses if x.low is not None} if policy == EARLIEST else {}
    return Decision(tuple(losses), describe(topic, losses, sorted(lows), recreated), resume)


_CAUSES = {
    BEYOND_END: "the topic was deleted and recreated, or the broker lost its data (a broker reset: the embedded "
    "broker keeps its data in memory)",
    BEFORE_START: "retention removed records before this slot read them",
    GONE: "the topic was recreated with fewer partitions",
}


def describe(
    topic: str, losses: Sequence[Loss], partitions: Sequence[int], recreated: tuple[str, str] | None = None
) -> str:
    """One line naming the topic, every lost partition with the checkpoint's position against what the
    broker holds, and the likely cause (Decision.reason adds the way out)."""
    parts = [str(p) for p in sorted(x.partition for x in losses)]
    listed = ", ".join(parts[:16]) + (f", ... ({len(parts)} partitions)" if len(parts) > 16 else "")
    head = f"input data loss on topic {topic!r}, partition{'s' if len(parts) > 1 else ''} {listed}"
    if recreated is not None:
        cause = (
            f"the topic was deleted and recreated since the checkpoint read it (topic id {recreated[0]}, now "
            f"{recreated[1]}), e.g. by a broker reset"
        )
    else:
        cause = "; ".join(dict.fromkeys(_CAUSES[x.kind] for x in losses))
    gone = [x for x in losses if x.kind == GONE]
    has = f" (it has partitions {list(partitions)})" if gone else ""
    shown = "; ".join(x.describe() for x in losses[:MAX_DESCRIBED])
    if len(losses) > MAX_DESCRIBED:  # the status keeps 2000 characters: the cause and the way out must fit
        more = [f"{x.partition}: {x.position}" for x in losses[MAX_DESCRIBED:]]
        listed = ", ".join(more[:16]) + (", ..." if len(more) > 16 else "")
        shown += f"; and {len(more)} more, at {{{listed}}} (partition: checkpoint offset)"
    return f"{head}: the checkpoint's positions are not in the topic: {shown}{has}. Likely cause: {cause}."


def skipped(topic: str, decision: Decision) -> str:
    """The warning logged when policy earliest resumes past a loss: what is skipped."""
    moves = ", ".join(
        f"partition {x.partition} from {x.position} to {decision.resume[x.partition]}"
        for x in decision.losses
        if x.partition in decision.resume
    )
    return f"on_data_loss=earliest: resuming {topic!r} at its earliest available offsets ({moves}): {decision.what}"


# --------------------------------------------------------------------------------------------
# What the broker holds


def observe(
    consumer,
    topic: str,
    partitions: Sequence[int],
    want: Mapping[int, int],
    timeout_s: float,
    metadata_timeout_s: float = 15.0,
) -> tuple[dict[int, int], dict[int, int]]:
    """(earliest, end) per partition of `partitions`, each end exact where it is below `want[p]` (the
    furthest position to check) and otherwise some value >= want[p]. ListOffsets first; a partition
    whose reported end is below its position is read from that end until EOF (its true end) or a record
    at or past the position - 1 (the position is in the log). A partition that says neither within
    `timeout_s` (a broker that does not answer) is taken as fine: reading it will tell."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    from baton.kafka.tail import is_fatal

    lows, ends = {}, {}
    for p in partitions:
        lows[p], ends[p] = consumer.get_watermark_offsets(
            TopicPartition(topic, p), timeout=metadata_timeout_s, cached=False
        )
    probe = {p: ends[p] for p in partitions if p in want and want[p] > ends[p]}
    if not probe:
        return lows, ends
    reached = dict(probe)
    eof: dict[int, int] = {}

    def settled(p: int) -> bool:
        return p in eof or reached[p] >= want[p]

    consumer.assign([TopicPartition(topic, p, o) for p, o in probe.items()])
    try:
        deadline = time.monotonic() + timeout_s
        while not all(map(settled, probe)) and time.monotonic() < deadline:
            for m in consumer.consume(10_000, 0.05):
                err, p = m.error(), m.partition()
                if p not in probe:
                    continue
                if err is None:
                    # A record at P - 1 proves P is in the log (P - 1 + 1 = P).
                    reached[p] = max(reached[p], m.offset() + 1)
                elif err.code() == KafkaError._PARTITION_EOF:
                    eof.setdefault(p, m.offset())
                elif err.code() == KafkaError._AUTO_OFFSET_RESET:
                    eof.setdefault(p, ends[p])  # the reported end itself is out of range: nothing past it
                elif is_fatal(err):
                    raise KafkaException(err)
            for tp in consumer.position([TopicPartition(topic, p) for p in probe if not settled(p)]):
                if tp.offset is not None and tp.offset > reached[tp.partition]:
                    reached[tp.partition] = tp.offset  # past transaction markers
    finally:
        consumer.unassign()
    for p in probe:
        if p in eof and reached[p] < want[p]:
            ends[p] = max(eof[p], reached[p])
        elif settled(p):
            ends[p] = max(want[p], reached[p])
        else:
            log.warning(
                "baton-kafka: %s[%d]: neither its end nor offset %d read within %.0fs; taking the position "
                "as in the log",
                topic,
                p,
                want[p] - 1,
                timeout_s,
            )
            ends[p] = want[p]
    return lows, ends


_NO_ID_WARNED: set[str] = set()


def topic_id(admin, topic: str, timeout_s: float = 15.0) -> str | None:
    """The topic's id (KIP-516; Apache Kafka and Tansu both give one, new at every creation), None when the
    broker gives none or cannot be asked."""
    from confluent_kafka import TopicCollection

    try:
        desc = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)[topic].result()
    except Exception as exc:  # noqa: BLE001 - an identity we cannot read is not a loss
        if topic not in _NO_ID_WARNED:  # once: a running reader asks every IDENTITY_EVERY_S
            _NO_ID_WARNED.add(topic)
            log.warning("baton-kafka: %s: no topic id (%s); a recreated topic is found by its offsets only", topic, exc)
        return None
    tid = getattr(desc, "topic_id", None)
    text = str(tid) if tid is not None else ""
    return text if text and text.strip("A=") else None  # all-zero id: the broker has none


# --------------------------------------------------------------------------------------------
# The identity file: which topic the checkpoint's positions belong to (kept inside the checkpoint, so a
# copy of the checkpoint carries it)


def read_identity(path: str | None) -> str | None:
    if not path:
        return None
    try:
        return json.loads(Path(path).read_text()).get("topic_id") or None
    except FileNotFoundError:
        return None
    except (ValueError, AttributeError, OSError) as exc:
        log.warning("baton-kafka: unreadable identity file %s (%s): taken as absent", path, exc)
        return None


def write_identity(path: str | None, topic: str, tid: str | None) -> None:
    if not path or not tid:
        return
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps({"topic": topic, "topic_id": tid}))
    os.replace(tmp, p)
