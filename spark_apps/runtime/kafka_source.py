"""Baton's Kafka source for Spark Structured Streaming (format "baton-kafka").

Built on confluent-kafka (librdkafka) and the Spark 4 Python data source API, because the JVM
Kafka connector is not available and because owning the source is what makes fences possible
(see `capfile`).

    from spark_apps.runtime.kafka_source import KafkaSource
    spark.dataSource.register(KafkaSource)
    df = (spark.readStream.format("baton-kafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("topic", "clicks")
          .option("startingOffsets", "earliest")
          .load())

Options (Spark lower-cases option keys; any case works):
  kafka.bootstrap.servers  required ("bootstrap.servers" is accepted as an alias).
  kafka.<librdkafka key>   any other librdkafka consumer setting, passed through (security etc.).
  topic                    required, one topic.
  startingOffsets          "earliest" | "latest" (default) | JSON {"0": 42, "1": 7} naming EVERY
                           partition (-2 = earliest, -1 = latest for one partition); offsets must lie
                           within the partition's [earliest, latest]. Only used for a new query:
                           a restarted query resumes from its checkpoint.
  startingTimestamp        epoch millis; each partition starts at its first record whose timestamp is
                           >= the value (the end if there is none). Exclusive with startingOffsets.
  maxRecordsPerTrigger     admission control: at most this many offsets per micro-batch, split across
                           partitions in proportion to their backlog (never stalls while data waits).
  capFile                  path of a JSON file {"0": 120, "1": 99} naming EVERY partition; a batch's
                           end per partition is min(available end, cap). Absent file = no cap. Read on
                           every trigger; write it atomically (write + rename). A cap below the
                           current position holds the partition where it is (never rewinds). This is
                           how the control plane fences a slot or keeps a standby behind the active.
  minBatchIntervalMs       a batch starts at most this often unless the cap file changed since the last
                           look (BatchPacer): with a short trigger interval, a moved cap (a standby
                           following the active, a fence, a handoff) starts its batch on the next tick,
                           while new input alone waits for this interval. Default 0: every trigger.
  pollTimeoutMs            executor read: fail the task after this long without progress (120000).
  valueFields              JSON [["name", "type"], ...] (types: spark_apps.runtime.decode.TYPES): the
                           source decodes each value as a JSON object with these fields (decode.py);
                           requires deadLetterDir. requiredFields: JSON ["name", ...], fields that must
                           be present (else the event is a dead letter).
  deadLetterDir            with valueFields: where each read task leaves the events that did not decode,
                           with their reasons (spark_apps.runtime.dead_letters).
  readOn                   "executors" (default): one Spark task per partition with data reads it;
                           "driver": Spark's driver-side source process reads every partition with one
                           long-lived consumer (kafka_driver_reader.py: no task per read, for the
                           latency of small batches).
  onDataLoss               "fail" (default) | "earliest": what a restarted query does when its checkpoint's
                           positions are not in the topic any more (beyond the end after a topic was
                           recreated or a broker reset, before the start after retention): fail with
                           InputDataLoss naming topic, partitions, positions and the way out, or resume
                           at the earliest available offsets (input_check.py).
  identityFile             path of a JSON file, kept inside the checkpoint, where the source records the
                           id of the topic its positions belong to: a recreated topic is then found even
                           when it has grown past the positions (input_check.py). Optional.
  batchTimesFile           readOn=driver: path of a file where the reader leaves the timestamps of each
                           batch's oldest and newest records, by the batch's end offsets (batch_times.py):
                           the slot's end-to-end latency. Optional.

Schema, raw (no valueFields): key binary, value binary, topic string, partition int, offset long,
timestamp timestamp. Key and value are binary (like Spark's own Kafka source): no decoding and no
crash on bytes that are not UTF-8; the app parses (from_json) and routes what does not parse to its
dead-letter topic. The timestamp is the record's timestamp in UTC (null when the record carries none).
Schema, decoded (valueFields): the fields, in order; events that do not decode are not rows.

Offsets are {"<partition>": next offset to read} with partitions in numeric order (Spark compares
offsets by their JSON text). One Spark input partition per Kafka partition with data in
[start, end); empty ranges are skipped. Spark's checkpoint is the only record of positions: nothing
is committed to Kafka (`commit` is a no-op, the fixed group.id exists only because librdkafka
wants one; there is no group subscription).

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

Executors (`read`): a fresh consumer per task, assigned (topic, partition, start), read_committed;
it stops when the next offset reaches `end`, not after a count, because transaction markers and
aborted records use offsets but are never delivered. Rows are returned as Arrow record batches
built column-wise (no per-row Python call beyond librdkafka's accessors).
"""

from __future__ import annotations

import json
import logging
import time
from bisect import bisect_left
from operator import itemgetter
from typing import Any, Iterator, Mapping, Optional, Sequence

from baton.kafka.positions import first_record, search_timestamp
from baton.kafka.tail import is_fatal as _fatal, probe_ends
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_apps.runtime.input_check import (
    BEFORE_START, FAIL, WAY_OUT, Decision, InputDataLoss, check_policy, decide, observe, read_identity, skipped,
    topic_id, write_identity,
)
from baton.kafka.client_config import kafka_config

log = logging.getLogger(__name__)

FORMAT = "baton-kafka"
GROUP_ID = "baton-source"

SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
])

EARLIEST, LATEST = -2, -1  # per-partition markers in a startingOffsets JSON, as in Spark's source

# Executor read tuning. CHUNK bounds one consume() call and one Arrow batch. TAIL_WAIT_S bounds
# a consume() that cannot fill up: consume(n) returns early only once n messages (or events)
# are queued, and a range ending in transaction markers holds fewer than n messages.
CHUNK = 10_000
TAIL_WAIT_S = 0.05
DEFAULT_POLL_TIMEOUT_MS = 120_000
PROBE_TIMEOUT_S = 10.0
METADATA_TIMEOUT_S = 15.0


# --------------------------------------------------------------------------------------------
# Options


class SourceOptions:
    """Parsed, validated options (everything but what needs the broker)."""

    __slots__ = ("bootstrap", "topic", "starting", "starting_timestamp", "max_records",
                 "cap_file", "poll_timeout_s", "kafka_conf", "value_fields", "required", "dead_letter_dir",
                 "read_on", "min_batch_interval_s", "on_data_loss", "identity_file", "batch_times_file")

    def __init__(self, bootstrap: str, topic: str, starting: Any, starting_timestamp: Optional[int],
                 max_records: Optional[int], cap_file: Optional[str], poll_timeout_s: float,
                 kafka_conf: dict[str, str], value_fields: Optional[list[tuple[str, str]]] = None,
                 required: Sequence[str] = (), dead_letter_dir: Optional[str] = None, read_on: str = "executors",
                 min_batch_interval_s: float = 0.0, on_data_loss: str = "fail", identity_file: Optional[str] = None,
                 batch_times_file: Optional[str] = None):
        self.bootstrap = bootstrap
        self.topic = topic
        self.starting = starting  # "earliest" | "latest" | {partition: offset or EARLIEST/LATEST}
        self.starting_timestamp = starting_timestamp
        self.max_records = max_records
        self.cap_file = cap_file
        self.poll_timeout_s = poll_timeout_s
        self.kafka_conf = kafka_conf
        self.value_fields = value_fields  # None: raw records
        self.required = list(required)
        self.dead_letter_dir = dead_letter_dir
        self.read_on = read_on
        self.min_batch_interval_s = min_batch_interval_s
        self.on_data_loss = on_data_loss  # input_check.POLICIES
        self.identity_file = identity_file
        self.batch_times_file = batch_times_file

    def __getstate__(self):
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state):
        for k, v in state.items():
            setattr(self, k, v)


def _positive_int(name: str, raw: str) -> int:
    try:
        v = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"option {name!r} must be a positive integer, got {raw!r}") from None
    if v <= 0:
        raise ValueError(f"option {name!r} must be a positive integer, got {raw!r}")
    return v


def _parse_partition_json(name: str, raw: str, topic: str, allow_markers: bool) -> dict[int, int]:
    """{"0": 42, "1": 7} (or Spark's {"<topic>": {...}}) -> {0: 42, 1: 7}."""
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"option {name!r} is not valid JSON ({exc.msg}): {raw!r}") from None
    if isinstance(obj, dict) and len(obj) == 1 and isinstance(obj.get(topic), dict):
        obj = obj[topic]
    if not isinstance(obj, dict) or not obj:
        raise ValueError(f"option {name!r} must be a non-empty JSON object of partition -> offset, got {raw!r}")
    out: dict[int, int] = {}
    for k, v in obj.items():
        try:
            p = int(k)
        except (TypeError, ValueError):
            raise ValueError(f"option {name!r}: partition key {k!r} is not an integer") from None
        if p < 0:
            raise ValueError(f"option {name!r}: partition {k!r} is negative")
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"option {name!r}: offset for partition {k!r} must be an integer, got {v!r}")
        if v < 0 and not (allow_markers and v in (EARLIEST, LATEST)):
            raise ValueError(f"option {name!r}: offset for partition {k!r} must be >= 0, got {v}")
        out[p] = v
    return out


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate options; every error is a ValueError naming the option."""
    opts = {str(k).lower(): v for k, v in dict(options).items()}
    bootstrap = opts.pop("kafka.bootstrap.servers", None)
    alias = opts.pop("bootstrap.servers", None)
    if bootstrap and alias and bootstrap != alias:
        raise ValueError("options 'kafka.bootstrap.servers' and 'bootstrap.servers' disagree; give one")
    bootstrap = bootstrap or alias
    if not bootstrap:
        raise ValueError("option 'kafka.bootstrap.servers' is required")
    topic = (opts.pop("topic", None) or "").strip()
    if not topic:
        raise ValueError("option 'topic' is required (one topic name)")
    if "," in topic:
        raise ValueError(f"option 'topic' takes one topic, got {topic!r}")

    raw_start = opts.pop("startingoffsets", None)
    raw_ts = opts.pop("startingtimestamp", None)
    if raw_start is not None and raw_ts is not None:
        raise ValueError("options 'startingOffsets' and 'startingTimestamp' are exclusive; give one")
    starting_timestamp = None
    starting: Any = "latest"
    if raw_ts is not None:
        try:
            starting_timestamp = int(str(raw_ts).strip())
        except ValueError:
            raise ValueError(f"option 'startingTimestamp' must be epoch milliseconds, got {raw_ts!r}") from None
        if starting_timestamp < 0:
            raise ValueError(f"option 'startingTimestamp' must be >= 0, got {raw_ts!r}")
        starting = None
    elif raw_start is not None:
        s = str(raw_start).strip()
        if s.lower() in ("earliest", "latest"):
            starting = s.lower()
        elif s.startswith("{"):
            starting = _parse_partition_json("startingOffsets", s, topic, allow_markers=True)
        else:
            raise ValueError(
                f"option 'startingOffsets' must be 'earliest', 'latest' or a JSON object "
                f"{{\"<partition>\": <offset>}}, got {raw_start!r}")

    raw_max = opts.pop("maxrecordspertrigger", None)
    max_records = _positive_int("maxRecordsPerTrigger", raw_max) if raw_max is not None else None
    cap_file = opts.pop("capfile", None) or None
    raw_interval = opts.pop("minbatchintervalms", None)
    interval_ms = _positive_int("minBatchIntervalMs", raw_interval) if raw_interval is not None else 0
    raw_poll = opts.pop("polltimeoutms", None)
    poll_ms = _positive_int("pollTimeoutMs", raw_poll) if raw_poll is not None else DEFAULT_POLL_TIMEOUT_MS

    value_fields, required, dead_letter_dir = _parse_decoding(opts)
    read_on = str(opts.pop("readon", "executors")).strip().lower()
    if read_on not in ("executors", "driver"):
        raise ValueError(f"option 'readOn' must be 'executors' or 'driver', got {read_on!r}")
    on_data_loss = check_policy(opts.pop("ondataloss", FAIL), "option 'onDataLoss'")
    identity_file = opts.pop("identityfile", None) or None
    batch_times_file = opts.pop("batchtimesfile", None) or None

    kafka_conf: dict[str, str] = {}
    for k in list(opts):
        if k.startswith("kafka."):
            key = k[len("kafka."):]
            if key in _OWNED_CONF:
                raise ValueError(f"option {k!r} is set by the source and cannot be overridden")
            kafka_conf[key] = opts.pop(k)
    # Anything left (e.g. a misspelt option) is ignored with a warning rather than an error, since
    # Spark itself may add options (e.g. "path").
    for k in opts:
        if k != "path":
            log.warning("baton-kafka: ignoring unknown option %r", k)
    return SourceOptions(bootstrap, topic, starting, starting_timestamp, max_records, cap_file,
                         poll_ms / 1000.0, kafka_conf, value_fields, required, dead_letter_dir, read_on,
                         interval_ms / 1000.0, on_data_loss, identity_file, batch_times_file)


def _parse_decoding(opts: dict) -> tuple[Optional[list[tuple[str, str]]], list[str], Optional[str]]:
    """valueFields / requiredFields / deadLetterDir (popped from `opts`), checked together."""
    from spark_apps.runtime.decode import DecodeSpecError, EventDecoder

    raw_fields, raw_required = opts.pop("valuefields", None), opts.pop("requiredfields", None)
    dead_letter_dir = opts.pop("deadletterdir", None) or None
    if raw_fields is None:
        if raw_required is not None or dead_letter_dir is not None:
            raise ValueError("options 'requiredFields' and 'deadLetterDir' go with 'valueFields'")
        return None, [], None
    try:
        fields = [(str(n), str(t).lower()) for n, t in json.loads(raw_fields)]
        required = [str(r) for r in json.loads(raw_required)] if raw_required is not None else []
    except (ValueError, TypeError):
        raise ValueError(f"option 'valueFields' must be JSON [[name, type], ...] and 'requiredFields' JSON "
                         f"[name, ...]; got {raw_fields!r} and {raw_required!r}") from None
    try:
        EventDecoder(fields, required)
    except DecodeSpecError as exc:
        raise ValueError(f"option 'valueFields': {exc}") from None
    if not dead_letter_dir:
        raise ValueError("option 'valueFields' needs 'deadLetterDir' (where events that do not decode go)")
    return fields, required, dead_letter_dir


_OWNED_CONF = {"group.id", "enable.auto.commit", "enable.partition.eof", "isolation.level",
               "auto.offset.reset", "enable.auto.offset.store"}


# --------------------------------------------------------------------------------------------
# Pure offset arithmetic (unit-tested without a broker)


def offsets_to_json(offsets: Mapping[int, int]) -> dict[str, int]:
    """{1: 7, 0: 42} -> {"0": 42, "1": 7}: numeric partition order, so equal offsets are equal JSON."""
    return {str(p): int(offsets[p]) for p in sorted(offsets)}


def offsets_from_json(offsets: Mapping[str, Any]) -> dict[int, int]:
    return {int(p): int(o) for p, o in offsets.items()}


def resolve_starting(spec: dict[int, int], partitions: Sequence[int], lows: Mapping[int, int],
                     ends: Mapping[int, int]) -> dict[int, int]:
    """Check a startingOffsets JSON against the topic and resolve the -2/-1 markers."""
    unknown = sorted(set(spec) - set(partitions))
    if unknown:
        raise ValueError(f"option 'startingOffsets' names partitions {unknown} that the topic does not have "
                         f"(it has {sorted(partitions)})")
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
            raise ValueError(f"option 'startingOffsets': offset {o} for partition {p} is outside the "
                             f"partition's available range [{lows[p]}, {ends[p]}]")
        out[p] = o
    return out


def parse_cap(text: str, partitions: Sequence[int], path: str = "capFile") -> dict[int, int]:
    """The cap file's JSON -> {partition: cap}; it must name exactly the topic's partitions."""
    spec = _parse_partition_json(f"capFile ({path})", text, "", allow_markers=False)
    unknown = sorted(set(spec) - set(partitions))
    missing = sorted(set(partitions) - set(spec))
    if unknown or missing:
        raise ValueError(f"option 'capFile' ({path}) must name every partition of the topic "
                         f"{sorted(partitions)}: missing {missing}, unknown {unknown}")
    return spec


def cap_text(path: Optional[str]) -> Optional[str]:
    """The cap file's text as it stands (None: no file): what BatchPacer compares."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def read_cap(path: str, partitions: Sequence[int], attempts: int = 3) -> Optional[dict[int, int]]:
    """Read the cap file; None when it does not exist. A torn read is retried briefly."""
    for i in range(attempts):
        text = cap_text(path)
        if text is None:
            return None
        try:
            return parse_cap(text, partitions, path)
        except ValueError:
            if i == attempts - 1:
                raise
            time.sleep(0.05)
    return None  # unreachable


class BatchPacer:
    """Holds a trigger (no batch) until `interval_s` has passed since the last look at the input,
    unless the cap file changed since then.

    The harness runs the query on a short trigger (a tick) and gives the app's trigger interval here:
    Spark's processing-time trigger waits for the next multiple of its interval, so a slot whose cap
    had just moved (a standby the active's marker let on, the fence a new active must reach, the cap
    lifted once it stands there) waited up to a whole interval, twice on a handoff's critical path.
    A held trigger costs a read of the cap file, nothing on the broker. State: two plain fields (the
    reader is pickled)."""

    def __init__(self, interval_s: float, cap_file: Optional[str]):
        self.interval_s, self.cap_file = interval_s, cap_file
        self._looked_at: Optional[float] = None
        self._looked_cap: Optional[str] = None

    def hold(self, now: Optional[float] = None) -> bool:
        if self.interval_s <= 0:
            return False
        now = time.monotonic() if now is None else now
        text = cap_text(self.cap_file)
        if self._looked_at is not None and text == self._looked_cap and now - self._looked_at < self.interval_s:
            return True
        self._looked_at, self._looked_cap = now, text
        return False


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


def plan_end(start: Mapping[int, int], available: Mapping[int, int], *,
             cap: Optional[Mapping[int, int]] = None, max_records: Optional[int] = None,
             target: Optional[Mapping[int, int]] = None) -> dict[int, int]:
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


def output_schema(opts: SourceOptions) -> StructType:
    if opts.value_fields is None:
        return SCHEMA
    return StructType([StructField(n, _SPARK_TYPES[t]()) for n, t in opts.value_fields])


_SPARK_TYPES = {"string": StringType, "bigint": LongType, "int": IntegerType, "smallint": ShortType,
                "tinyint": ByteType, "double": DoubleType, "float": FloatType, "boolean": BooleanType}


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


# --------------------------------------------------------------------------------------------
# The source


class KafkaSource(DataSource):
    """Register with `spark.dataSource.register(KafkaSource)`; use format "baton-kafka"."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return output_schema(parse_options(self.options))

    def streamReader(self, schema: StructType) -> "KafkaStreamReader":
        opts = self._checked(schema)
        if opts.read_on == "driver":  # Spark then asks for simpleStreamReader
            from pyspark.errors import PySparkNotImplementedError

            raise PySparkNotImplementedError(errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"})
        return KafkaStreamReader(opts)

    def simpleStreamReader(self, schema: StructType):
        from spark_apps.runtime.kafka_driver_reader import DriverStreamReader

        return DriverStreamReader(self._checked(schema))

    def _checked(self, schema: StructType) -> SourceOptions:
        opts = parse_options(self.options)
        expected = output_schema(opts)
        if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in expected.fields]:
            raise ValueError(f"{FORMAT} has the schema its options give ({expected.simpleString()}); "
                             f"got {schema.simpleString()}")
        return opts


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Runs in three processes (Spark's source runner on the driver, the planner, the executors),
    each with its own copy: Kafka clients are created lazily and dropped when pickled."""

    def __init__(self, options: SourceOptions):
        self.opts = options
        self._probe = None  # driver-side consumer for end offsets and timestamp search
        self._latest: Optional[dict[int, int]] = None  # last available ends seen (uncapped)
        self._lows: dict[int, int] = {}
        self._target: Optional[dict[int, int]] = None  # Trigger.AvailableNow bound
        self._pacer = BatchPacer(options.min_batch_interval_s, options.cap_file)
        self._admin = None  # for the topic id (input_check.topic_id)
        self.verified = False  # this process checked the query's positions against the input (resume_point)
        self._jump: Optional[dict] = None  # the end of the resume batch planned (policy earliest), until committed
        self._adopt: Optional[str] = None  # the topic id to record once that batch is committed
        self._stale_cap: Optional[str] = None  # the cap file's text when a resume moved positions back

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
        conf = kafka_config(self.opts.bootstrap, {
            "group.id": GROUP_ID,  # required by librdkafka; no subscription, nothing committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "error",  # a position that no longer exists fails, never skips
        })
        conf.update(tuning)
        conf.update(self.opts.kafka_conf)
        return conf

    def _consumer(self):
        if self._probe is None:
            from confluent_kafka import Consumer

            self._probe = Consumer(self._conf(**{"fetch.wait.max.ms": 10}))
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
            lo, hi = c.get_watermark_offsets(TopicPartition(self.opts.topic, p), timeout=METADATA_TIMEOUT_S,
                                             cached=False)
            lows[p], ends[p] = lo, hi
        self._lows.update(lows)
        return lows, ends

    def available_ends(self, parts: Sequence[int]) -> dict[int, int]:
        """Readable end per partition: the ListOffsets lower bound, then read to EOF or past the bound."""
        _, bound = self._watermarks(parts)
        ends, unsettled = probe_ends(self._consumer(), self.opts.topic, bound, PROBE_TIMEOUT_S)
        if unsettled:
            log.warning("baton-kafka: no partition EOF within %.0fs for %s; using positions reached",
                        PROBE_TIMEOUT_S, sorted(unsettled))
        return ends

    def offset_for_timestamp(self, p: int, ts_ms: int, low: int, end: int) -> int:
        """Smallest offset o such that every record at >= o has timestamp >= ts_ms (assuming
        timestamps do not decrease within the partition): binary search, one record per step."""
        consumer = self._consumer()
        return search_timestamp(
            lambda o: first_record(consumer, self.opts.topic, p, o, end, self.opts.poll_timeout_s), ts_ms, low, end)

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
            from spark_apps.runtime.dead_letters import write_initial

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
        cap = read_cap(self.opts.cap_file, parts) if self.opts.cap_file else None
        max_records = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = plan_end(begin, available, cap=cap, max_records=max_records, target=self._target)
        end_json = offsets_to_json(end)
        return start if end_json == start else end_json

    def reportLatestOffset(self) -> Optional[dict]:
        return offsets_to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if end == self._jump:
            return []  # the resume batch: it only moves positions
        s, e = offsets_from_json(start), offsets_from_json(end)
        if not self.verified:  # a batch replayed after a restart: planned on input that may be gone
            self.verified = True
            ranges = self.replay_ranges(s, e)
            return [KafkaInputPartition(self.opts.topic, p, lo, hi) for p, (lo, hi) in sorted(ranges.items()) if hi > lo]
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
    def verify(self, start: dict[int, int], end: Optional[dict[int, int]] = None) -> Decision:
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

    def resume_point(self, begin: dict[int, int]) -> Optional[dict[int, int]]:
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
            from spark_apps.runtime.dead_letters import write_spool

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
                lo = min(max(lo, lost[p].low), max(lo, e))
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

    def _topic_id(self, timeout_s: float = METADATA_TIMEOUT_S) -> Optional[str]:
        if not self.opts.identity_file:
            return None
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(kafka_config(self.opts.bootstrap, self.opts.kafka_conf))
        return topic_id(self._admin, self.opts.topic, timeout_s)

    # -- executors: the hot path
    def read(self, partition: KafkaInputPartition) -> Iterator[Any]:
        from confluent_kafka import Consumer

        topic, p, start, end = partition.topic, partition.partition, partition.start, partition.end
        if start >= end:
            return
        c = Consumer(self._conf(**{
            "queued.min.messages": 1_000_000,
            "fetch.queue.backoff.ms": 1,
            "fetch.wait.max.ms": 100,
        }))
        try:
            chunks = read_range(c, topic, p, start, end, self.opts.poll_timeout_s, self.opts.on_data_loss)
            if self.opts.value_fields is None:
                yield from raw_batches(chunks, topic, p)
            else:
                yield from decoded_batches(chunks, self.opts, p, start, end)
        finally:
            c.close()


def read_range(c, topic: str, p: int, start: int, end: int, timeout_s: float,
               on_data_loss: str = FAIL) -> Iterator[tuple[list, list[int]]]:
    """The records of `topic`[p] in [start, end) as (messages, offsets) chunks of at most CHUNK, read
    by the assigned consumer `c`. Stops when the next offset reaches `end`, not after a count:
    transaction markers and aborted records use offsets but are never delivered. A position the broker
    says is not in the log (retention or a recreated topic under the query) is InputDataLoss, or under
    policy earliest: past retention the range reads on from the earliest offset, beyond the end it ends."""
    from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

    from spark_apps.runtime.prefetch import OUT_OF_RANGE

    tp = TopicPartition(topic, p, start)
    c.assign([tp])
    consume, position = c.consume, c.position
    m_offset, m_err = Message.offset, Message.error
    EOF = KafkaError._PARTITION_EOF
    nxt = start
    progress_at = time.monotonic()
    while nxt < end:
        want = end - nxt
        if want > CHUNK:
            want = CHUNK
        msgs = consume(want, TAIL_WAIT_S)
        got = len(msgs)
        done = False
        if got:
            if any(map(m_err, msgs)):
                data = []
                for m in msgs:
                    err = m.error()
                    if err is None:
                        data.append(m)
                    elif err.code() == EOF:
                        if m.offset() >= end:
                            done = True
                    elif err.code() in OUT_OF_RANGE:
                        low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=METADATA_TIMEOUT_S,
                                                            cached=False)
                        what = describe_out_of_range(topic, p, m.offset(), start, end, low, high)
                        if on_data_loss == FAIL:
                            raise InputDataLoss(f"{what} {WAY_OUT}.")
                        log.warning("baton-kafka: on_data_loss=earliest: %s What is not in the log is skipped.", what)
                        if m.offset() >= low or low >= end:  # beyond the end, or all of the range removed
                            done = True
                        else:  # past retention: read on from the earliest offset
                            c.assign([TopicPartition(topic, p, low)])
                            nxt, progress_at = low, time.monotonic()
                    elif _fatal(err):
                        raise KafkaException(err)
                msgs = data
            if msgs:
                offs = list(map(m_offset, msgs))
                if offs[-1] >= end:
                    k = bisect_left(offs, end)
                    msgs, offs, done = msgs[:k], offs[:k], True
            if msgs:
                nxt = offs[-1] + 1
                yield msgs, offs
                progress_at = time.monotonic()
        if done:
            break
        if got < want:
            # Short: caught up with the fetcher, or only markers/aborted records remain before
            # `end`. The position moves past transaction markers.
            pos = position([tp])[0].offset
            if pos > nxt:
                nxt = pos
                progress_at = time.monotonic()
            elif time.monotonic() - progress_at > timeout_s:
                raise TimeoutError(
                    f"{topic}[{p}]: no progress at offset {nxt} (reading to {end}) for {timeout_s:.0f}s")


def describe_out_of_range(topic: str, p: int, offset: int, start: int, end: int, low: int, high: int) -> str:
    """One line for a read that met a position the broker does not hold (ListOffsets' figures: on Tansu
    the end is a lower bound)."""
    return (f"input data loss on topic {topic!r}, partition {p}: offset {offset} is not in the log (the broker holds "
            f"[{low}, {high})) while reading [{start}, {end}): the topic was recreated or truncated, or retention "
            f"removed records before they were read.")


def raw_columns(msgs: list) -> list[list]:
    """key, value, offset, timestamp (ms, None when the record has none) of raw records."""
    from confluent_kafka import Message

    stamps = list(map(itemgetter(1), map(Message.timestamp, msgs)))
    if stamps and min(stamps) < 0:  # TIMESTAMP_NOT_AVAILABLE
        stamps = [t if t >= 0 else None for t in stamps]
    return [list(map(Message.key, msgs)), list(map(Message.value, msgs)), list(map(Message.offset, msgs)), stamps]


def raw_record_batch(topic: str, p: int, columns: list[list]):
    """An Arrow record batch of SCHEMA from raw_columns."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(SCHEMA, timezone="UTC")
    keys, values, offsets, stamps = columns
    n = len(offsets)
    return pa.RecordBatch.from_arrays([
        pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
        pa.array([topic] * n, pa.string()), pa.array([p] * n, pa.int32()), pa.array(offsets, pa.int64()),
        pa.array(stamps, pa.timestamp("ms", tz="UTC")).cast(schema.field("timestamp").type),
    ], schema=schema)


def decode_records(decoder, msgs: list) -> tuple[list[int], list[list], list[tuple]]:
    """(offsets of the events that decode, their columns, dead letters (offset, key, value, reason))."""
    from confluent_kafka import Message

    values = list(map(Message.value, msgs))
    columns, dead = decoder.decode(values)
    offsets = list(map(Message.offset, msgs))
    if not dead:
        return offsets, columns, []
    bad = {i for i, _ in dead}
    good = [o for i, o in enumerate(offsets) if i not in bad]
    return good, columns, [(offsets[i], msgs[i].key(), values[i], reason) for i, reason in dead]


def decoded_record_batch(opts: SourceOptions, columns: list[list]):
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(output_schema(opts), timezone="UTC")
    return pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(columns, schema)], schema=schema)


def raw_batches(chunks, topic: str, p: int) -> Iterator[Any]:
    """Raw records as Arrow record batches built column-wise (SCHEMA)."""
    for msgs, _offs in chunks:
        yield raw_record_batch(topic, p, raw_columns(msgs))


def decoded_batches(chunks, opts: SourceOptions, p: int, start: int, end: int) -> Iterator[Any]:
    """Decoded events as Arrow record batches of the declared fields; the events that do not decode
    go to the dead-letter spool file of [start, end), written (even empty) once the range is read."""
    from spark_apps.runtime.dead_letters import write_spool
    from spark_apps.runtime.decode import EventDecoder

    decoder = EventDecoder(opts.value_fields, opts.required)
    dead_all: list[tuple] = []
    for msgs, _offs in chunks:
        _good, columns, dead = decode_records(decoder, msgs)
        if columns[0]:
            yield decoded_record_batch(opts, columns)
        dead_all.extend(dead)
    write_spool(opts.dead_letter_dir, p, start, end, *dead_columns(dead_all))


def dead_columns(dead: list[tuple]) -> tuple[list, list, list, list]:
    """(keys, values, reasons, offsets) of (offset, key, value, reason) dead letters."""
    return [d[1] for d in dead], [d[2] for d in dead], [d[3] for d in dead], [d[0] for d in dead]
