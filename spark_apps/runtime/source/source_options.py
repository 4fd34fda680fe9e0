"""The options of Baton's Kafka source (spark_apps.runtime.source.kafka_source), parsed and checked before
anything reads the broker.

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
  valueFields              JSON [["name", "type"], ...] (types: spark_apps.runtime.source.decode.TYPES): the
                           source decodes each value as a JSON object with these fields (decode.py);
                           requires deadLetterDir. requiredFields: JSON ["name", ...], fields that must
                           be present (else the event is a dead letter).
  packRows                 with valueFields: "false" (default) | "true": hand Spark many decoded events to a
                           row (packed_rows.py; the reader unpacks them with packed_rows.unpack).
  deadLetterDir            with valueFields: where each read task leaves the events that did not decode,
                           with their reasons (spark_apps.runtime.sink.dead_letters).
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
  alignPartitions          readOn=driver: "true" (default) | "false". True: while a backlog is read, a batch
                           takes no partition's records far ahead in time of the others' (prefetch.py),
                           which an event-time watermark needs; false: every partition's ready records
                           (an app without event time: holding records back only adds latency).
  batchTimesFile           readOn=driver: path of a file where the reader leaves the timestamps of each
                           batch's oldest and newest records, by the batch's end offsets (batch_times.py):
                           the slot's end-to-end latency. Optional.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from spark_apps.runtime.source.input_check import FAIL, check_policy

log = logging.getLogger(__name__)

EARLIEST, LATEST = -2, -1  # per-partition markers in a startingOffsets JSON, as in Spark's source
DEFAULT_POLL_TIMEOUT_MS = 120_000


class SourceOptions:
    """Parsed, validated options (everything but what needs the broker)."""

    __slots__ = (
        "bootstrap",
        "topic",
        "starting",
        "starting_timestamp",
        "max_records",
        "cap_file",
        "poll_timeout_s",
        "kafka_conf",
        "value_fields",
        "required",
        "dead_letter_dir",
        "read_on",
        "min_batch_interval_s",
        "on_data_loss",
        "identity_file",
        "batch_times_file",
        "align_partitions",
        "packed",
    )

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        starting: Any,
        starting_timestamp: int | None,
        max_records: int | None,
        cap_file: str | None,
        poll_timeout_s: float,
        kafka_conf: dict[str, str],
        value_fields: list[tuple[str, str]] | None = None,
        required: Sequence[str] = (),
        dead_letter_dir: str | None = None,
        read_on: str = "executors",
        min_batch_interval_s: float = 0.0,
        on_data_loss: str = "fail",
        identity_file: str | None = None,
        batch_times_file: str | None = None,
        align_partitions: bool = True,
        packed: bool = False,
    ):
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
        self.align_partitions = align_partitions
        self.packed = packed  # decoded events many to a row (packed_rows.py)

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


def parse_partition_json(
    name: str, raw: str, topic: str, allow_markers: bool, ignore: tuple[str, ...] = ()
) -> dict[int, int]:
    """{"0": 42, "1": 7} (or Spark's {"<topic>": {...}}) -> {0: 42, 1: 7}; keys in `ignore` are left out."""
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"option {name!r} is not valid JSON ({exc.msg}): {raw!r}") from None
    if isinstance(obj, dict) and len(obj) == 1 and isinstance(obj.get(topic), dict):
        obj = obj[topic]
    if isinstance(obj, dict) and ignore:
        obj = {k: v for k, v in obj.items() if k not in ignore}
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
            starting = parse_partition_json("startingOffsets", s, topic, allow_markers=True)
        else:
            raise ValueError(
                f"option 'startingOffsets' must be 'earliest', 'latest' or a JSON object "
                f'{{"<partition>": <offset>}}, got {raw_start!r}'
            )

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
    raw_align = str(opts.pop("alignpartitions", "true")).strip().lower()
    if raw_align not in ("true", "false"):
        raise ValueError(f"option 'alignPartitions' must be 'true' or 'false', got {raw_align!r}")
    raw_packed = str(opts.pop("packrows", "false")).strip().lower()
    if raw_packed not in ("true", "false"):
        raise ValueError(f"option 'packRows' must be 'true' or 'false', got {raw_packed!r}")
    if raw_packed == "true" and value_fields is None:
        raise ValueError("option 'packRows' goes with 'valueFields' (it packs decoded events)")

    kafka_conf: dict[str, str] = {}
    for k in list(opts):
        if k.startswith("kafka."):
            key = k[len("kafka.") :]
            if key in _OWNED_CONF:
                raise ValueError(f"option {k!r} is set by the source and cannot be overridden")
            kafka_conf[key] = opts.pop(k)
    # Anything left (e.g. a misspelt option) is ignored with a warning rather than an error, since
    # Spark itself may add options (e.g. "path").
    for k in opts:
        if k != "path":
            log.warning("baton-kafka: ignoring unknown option %r", k)
    return SourceOptions(
        bootstrap,
        topic,
        starting,
        starting_timestamp,
        max_records,
        cap_file,
        poll_ms / 1000.0,
        kafka_conf,
        value_fields,
        required,
        dead_letter_dir,
        read_on,
        interval_ms / 1000.0,
        on_data_loss,
        identity_file,
        batch_times_file,
        align_partitions=raw_align == "true",
        packed=raw_packed == "true",
    )


def _parse_decoding(opts: dict) -> tuple[list[tuple[str, str]] | None, list[str], str | None]:
    """valueFields / requiredFields / deadLetterDir (popped from `opts`), checked together."""
    from spark_apps.runtime.source.decode import DecodeSpecError, EventDecoder

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
        raise ValueError(
            f"option 'valueFields' must be JSON [[name, type], ...] and 'requiredFields' JSON "
            f"[name, ...]; got {raw_fields!r} and {raw_required!r}"
        ) from None
    try:
        EventDecoder(fields, required)
    except DecodeSpecError as exc:
        raise ValueError(f"option 'valueFields': {exc}") from None
    if not dead_letter_dir:
        raise ValueError("option 'valueFields' needs 'deadLetterDir' (where events that do not decode go)")
    return fields, required, dead_letter_dir


_OWNED_CONF = {
    "group.id",
    "enable.auto.commit",
    "enable.partition.eof",
    "isolation.level",
    "auto.offset.reset",
    "enable.auto.offset.store",
}
